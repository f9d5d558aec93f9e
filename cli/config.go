package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Environment variables the client commands read when neither a flag nor
// ~/.cbtrc says otherwise (see docs/cli-config.md).
const (
	envProject  = "EBBTABLE_PROJECT"
	envInstance = "EBBTABLE_INSTANCE"
	envAddr     = "EBBTABLE_ADDR"
	envEmulator = "BIGTABLE_EMULATOR_HOST"
)

// defaultID is the project and instance used when nothing names one.
const defaultID = "ebbtable"

// cbtrc is what ebbtable takes from cbt's configuration file, ~/.cbtrc.
// The file has one `key = value` per line; cbt refuses unknown keys and
// lines without '=', and so does ebbtable, so a file both tools read means
// the same to both.
type cbtrc struct {
	path          string
	project       string
	instance      string
	dataEndpoint  string
	adminEndpoint string
	timeout       time.Duration
}

// cbtrcKeys are the keys cbt accepts. Those ebbtable has no use for (creds,
// cert-file, user-agent, auth-token: a local server needs no credentials)
// are accepted and ignored.
var cbtrcKeys = map[string]func(c *cbtrc, v string) error{
	"project":        func(c *cbtrc, v string) error { c.project = v; return nil },
	"instance":       func(c *cbtrc, v string) error { c.instance = v; return nil },
	"data-endpoint":  func(c *cbtrc, v string) error { c.dataEndpoint = v; return nil },
	"admin-endpoint": func(c *cbtrc, v string) error { c.adminEndpoint = v; return nil },
	"timeout": func(c *cbtrc, v string) (err error) {
		c.timeout, err = time.ParseDuration(v)
		return err
	},
	"creds":      func(*cbtrc, string) error { return nil },
	"cert-file":  func(*cbtrc, string) error { return nil },
	"user-agent": func(*cbtrc, string) error { return nil },
	"auth-token": func(*cbtrc, string) error { return nil },
}

// cbtrcPath is where cbt looks for its configuration: $HOME/.cbtrc.
func cbtrcPath() string { return filepath.Join(os.Getenv("HOME"), ".cbtrc") }

// loadCbtrc reads the file at path; a missing file is an empty
// configuration, as it is for cbt.
func loadCbtrc(path string) (cbtrc, error) {
	c := cbtrc{path: path}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read %s: %w", path, err)
	}
	return parseCbtrc(path, string(data))
}

// parseCbtrc parses the text of a .cbtrc file the way cbt does: blank lines
// are skipped, every other line is KEY = VALUE split at the first '=' with
// both sides trimmed.
func parseCbtrc(path, text string) (cbtrc, error) {
	c := cbtrc{path: path}
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return c, fmt.Errorf("%s line %d: %q is not KEY = VALUE", path, n, line)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		set, known := cbtrcKeys[k]
		if !known {
			return c, fmt.Errorf("%s line %d: unknown key %q (cbt knows project, instance, creds, admin-endpoint, data-endpoint, cert-file, user-agent, auth-token, timeout)", path, n, k)
		}
		if err := set(&c, v); err != nil {
			return c, fmt.Errorf("%s line %d: %s: %w", path, n, k, err)
		}
	}
	return c, sc.Err()
}

// resolve fills the settings no flag gave: project, instance and timeout
// from ~/.cbtrc, then the EBBTABLE_* environment, then the defaults; the
// address from EBBTABLE_ADDR, then BIGTABLE_EMULATOR_HOST, then ~/.cbtrc's
// data-endpoint or admin-endpoint, then the default. It runs once; a broken ~/.cbtrc is remembered and
// reported by dial.
func (f *connFlags) resolve() error {
	if f.resolved {
		return f.resolveErr
	}
	f.resolved = true
	rc, err := loadCbtrc(cbtrcPath())
	if err != nil {
		f.resolveErr = usageError{fmt.Errorf("%w (cbt reads this file too; fix or remove it)", err)}
		return f.resolveErr
	}
	f.project = first(f.project, rc.project, os.Getenv(envProject), defaultID)
	f.instance = first(f.instance, rc.instance, os.Getenv(envInstance), defaultID)
	// The address differs: cbt (its client library) lets
	// BIGTABLE_EMULATOR_HOST override the file's endpoints, so ebbtable
	// does too; TestCbtrcShared checks cbt still behaves so.
	f.addr = first(f.addr, os.Getenv(envAddr), os.Getenv(envEmulator), rc.dataEndpoint, rc.adminEndpoint, defaultAddr)
	if f.timeout == 0 {
		f.timeout = rc.timeout
	}
	return nil
}

// first is the first non-empty string.
func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// configHelp documents the precedence; it heads docs/cli.md and the root
// command's help.
const configHelp = `Client commands find the server, project and instance the way cbt does, so
cbt and ebbtable see the same tables with no flags. Each setting comes from
the first of:

Project, instance and timeout:
  1. the flags --project, --instance, --timeout;
  2. ~/.cbtrc, cbt's own file: project, instance, timeout (cbt's other keys
     are accepted and ignored; an unknown key or a line without '=' is an
     error, as it is for cbt);
  3. the environment: EBBTABLE_PROJECT, EBBTABLE_INSTANCE;
  4. the default: project and instance "ebbtable", no timeout.

The server's address:
  1. the flag --addr;
  2. EBBTABLE_ADDR;
  3. BIGTABLE_EMULATOR_HOST, what cbt and the client libraries use (cbt lets
     it override the endpoints in ~/.cbtrc, and so does ebbtable);
  4. ~/.cbtrc's data-endpoint, else its admin-endpoint;
  5. the default, localhost:8086.`
