package auth

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
)

// Role is what a token may do, after Bigtable's predefined IAM roles. Each
// role includes the ones below it: a reader may do what a viewer may, a
// user what a reader may, an admin everything.
type Role int

// The roles, weakest first.
const (
	// None grants nothing (no credentials, or a call no token may make).
	None Role = iota
	// Viewer reads metadata: instances, clusters, tables, schemas,
	// backups, status. No data (roles/bigtable.viewer).
	Viewer
	// Reader reads data too (roles/bigtable.reader).
	Reader
	// User writes data too (roles/bigtable.user).
	User
	// Admin may call everything, the admin APIs included
	// (roles/bigtable.admin).
	Admin
)

// String is the role's name in token files.
func (r Role) String() string {
	switch r {
	case Viewer:
		return "viewer"
	case Reader:
		return "reader"
	case User:
		return "user"
	case Admin:
		return "admin"
	}
	return "none"
}

// ParseRole reads a role name as token files spell it.
func ParseRole(s string) (Role, error) {
	for _, r := range []Role{Viewer, Reader, User, Admin} {
		if strings.EqualFold(s, r.String()) {
			return r, nil
		}
	}
	return None, fmt.Errorf("unknown role %q (want viewer, reader, user or admin)", s)
}

// Token is one line of a token file.
type Token struct {
	// Role is what the token may do.
	Role Role
	// Instances limits the token to these instance IDs; empty: all.
	Instances []string
	// Line is the token's line in its file (for messages; never the
	// secret itself).
	Line int
	// Members are who the token is to IAM policies: the `as=MEMBER`
	// fields of its line (user:…, serviceAccount:…, group:…), or, with
	// none, token:HASH, the first 12 hex digits of the token's SHA-256.
	Members []string

	sum [sha256.Size]byte
}

// Allows says whether the token may touch the named instance.
func (t *Token) Allows(instance string) bool {
	return len(t.Instances) == 0 || slices.Contains(t.Instances, instance)
}

// Unrestricted says whether the token covers every instance.
func (t *Token) Unrestricted() bool { return len(t.Instances) == 0 }

// MinTokenLen is the shortest token a file may hold: guessing one must be
// hopeless.
const MinTokenLen = 16

// ParseTokens reads a token file: one token a line, `TOKEN ROLE
// [INSTANCE…] [as=MEMBER…]`, fields separated by blanks; `#` starts a
// comment; blank lines are skipped. A token listing no instances covers all
// of them; each as= names an IAM member the token is (TokenMember without
// one).
func ParseTokens(r io.Reader) ([]Token, error) {
	var out []Token
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("line %d: want TOKEN ROLE [INSTANCE...]", n)
		}
		if len(f[0]) < MinTokenLen {
			return nil, fmt.Errorf("line %d: token is %d characters; use at least %d (for example: openssl rand -hex 32)", n, len(f[0]), MinTokenLen)
		}
		role, err := ParseRole(f[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		t := Token{Role: role, Line: n, sum: sha256.Sum256([]byte(f[0]))}
		for _, x := range f[2:] {
			m, ok := strings.CutPrefix(x, "as=")
			if !ok {
				t.Instances = append(t.Instances, x)
				continue
			}
			if err := checkMember(m); err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			t.Members = append(t.Members, m)
		}
		if len(t.Members) == 0 {
			t.Members = []string{TokenMember(f[0])}
		}
		if prev, dup := seen[t.sum]; dup {
			return nil, fmt.Errorf("line %d: the token of line %d again", n, prev)
		}
		seen[t.sum] = n
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// TokenMember is the IAM member of a token line without as=:
// token:HASH, HASH the first 12 hex digits of the token's SHA-256
// (`printf %s TOKEN | sha256sum | cut -c1-12`). It names the token without
// giving away any of it.
func TokenMember(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "token:" + hex.EncodeToString(sum[:6])
}

// memberKinds are the member prefixes a token may take on.
var memberKinds = []string{"user:", "serviceAccount:", "group:", "principal:"}

func checkMember(m string) error {
	for _, k := range memberKinds {
		if strings.HasPrefix(m, k) && len(m) > len(k) && !strings.ContainsAny(m, " \t") {
			return nil
		}
	}
	return fmt.Errorf("as=%s: a member is user:EMAIL, serviceAccount:EMAIL, group:EMAIL or principal:…", m)
}

// lookup finds the token matching secret. Every token is compared, in
// constant time over hashes of equal length, so neither the time taken nor
// an early exit tells how much of a guess was right or which line matched.
func lookup(tokens []Token, secret string) *Token {
	sum := sha256.Sum256([]byte(secret))
	var found *Token
	for i := range tokens {
		if subtle.ConstantTimeCompare(tokens[i].sum[:], sum[:]) == 1 {
			found = &tokens[i]
		}
	}
	return found
}

// PeerHeader is the metadata key that carries the peer credential on
// cluster-to-cluster calls. It is not `authorization`, so no client token
// is ever taken for it, and it is not taken for a client token.
const PeerHeader = "x-ebbtable-peer"

// NodeHeader is the metadata key that carries the node credential on calls
// between the nodes of one cluster (scale-out: a move's span, a passed-on
// move, a backup's part, a node's part of a peer's pull). Like PeerHeader
// it is never taken for a client token, nor a token for it.
const NodeHeader = "x-ebbtable-node"

// ReadPeerCredential reads a peer credential file: its first non-blank,
// non-comment line is the secret every cluster of the instance shares.
func ReadPeerCredential(path string) (string, error) { return readSecret(path, "peer credential") }

// ReadNodeCredential reads a node credential file: its first non-blank,
// non-comment line is the secret every node of one cluster shares.
func ReadNodeCredential(path string) (string, error) { return readSecret(path, "node credential") }

func readSecret(path, what string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line != "" {
			if len(line) < MinTokenLen {
				return "", fmt.Errorf("%s: the %s is %d characters; use at least %d", path, what, len(line), MinTokenLen)
			}
			return line, nil
		}
	}
	return "", fmt.Errorf("%s: no %s in the file", path, what)
}

// Authenticator holds the tokens and the peer credential, and answers
// Check. Reload swaps the tokens atomically; calls in flight finish with
// the set they started with.
type Authenticator struct {
	tokenFile string

	mu     sync.RWMutex
	tokens []Token
	// tokensOn: client calls need a token (a token file was given).
	tokensOn bool
	peer     [sha256.Size]byte
	peerOn   bool
	node     [sha256.Size]byte
	nodeOn   bool
}

// Options configure an Authenticator.
type Options struct {
	// TokenFile is the token file; "" turns client authentication off
	// (every client call is allowed).
	TokenFile string
	// PeerCredential is the shared secret peers present in PeerHeader;
	// "" means no call can authenticate as a peer when TokenFile is set,
	// and peer methods stay open when it is not.
	PeerCredential string
	// NodeCredential is the secret the nodes of this cluster present in
	// NodeHeader; "" means no call authenticates as a node (methods that
	// take it then need their client role).
	NodeCredential string
}

// New reads the token file.
func New(o Options) (*Authenticator, error) {
	a := &Authenticator{tokenFile: o.TokenFile}
	if o.PeerCredential != "" {
		a.peer, a.peerOn = sha256.Sum256([]byte(o.PeerCredential)), true
	}
	if o.NodeCredential != "" {
		a.node, a.nodeOn = sha256.Sum256([]byte(o.NodeCredential)), true
	}
	if o.TokenFile != "" {
		a.tokensOn = true
		if err := a.Reload(); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Reload re-reads the token file. On an error the old tokens stay.
func (a *Authenticator) Reload() error {
	if a.tokenFile == "" {
		return nil
	}
	f, err := os.Open(a.tokenFile)
	if err != nil {
		return fmt.Errorf("ebbtable: token file: %w", err)
	}
	defer f.Close()
	tokens, err := ParseTokens(f)
	if err != nil {
		return fmt.Errorf("ebbtable: token file %s: %w", a.tokenFile, err)
	}
	if len(tokens) == 0 {
		return fmt.Errorf("ebbtable: token file %s holds no tokens", a.tokenFile)
	}
	a.mu.Lock()
	a.tokens = tokens
	a.mu.Unlock()
	return nil
}

// ReadsHeaders says whether Check looks at a call's credentials (Call's
// Bearer, Peer and Node) at all: only when a token file, a peer or a node
// credential is set. Without them every call's answer follows from its
// method, and the server need not look for the headers.
func (a *Authenticator) ReadsHeaders() bool {
	return a != nil && (a.tokensOn || a.peerOn || a.nodeOn)
}

// TokensOn says whether client calls need a token.
func (a *Authenticator) TokensOn() bool { return a != nil && a.tokensOn }

// Errors Check returns; the server maps them to UNAUTHENTICATED and
// PERMISSION_DENIED.
var (
	ErrUnauthenticated = errors.New("ebbtable: unauthenticated")
	ErrDenied          = errors.New("ebbtable: permission denied")
)

// Call is what Check needs to know of one call.
type Call struct {
	// Method is the full gRPC method name (/package.Service/Method).
	Method string
	// Bearer is the token from `authorization: Bearer …`, or "".
	Bearer string
	// Peer is the value of PeerHeader, or "".
	Peer string
	// Node is the value of NodeHeader, or "".
	Node string
}

// Principal is who a checked call runs as.
type Principal struct {
	// Peer: the call presented the peer credential for a peer method.
	Peer bool
	// Node: the call presented the node credential for a node method.
	Node bool
	// Token is the client token used, nil for peers and when client
	// authentication is off.
	Token *Token
}

// Check decides whether a call may proceed, before its request is read.
// Resources the request names are checked with Principal.AllowsInstance.
func (a *Authenticator) Check(c Call) (Principal, error) {
	need := Need(c.Method)
	if need.Open {
		return Principal{}, nil
	}
	if need.Node && c.Node != "" && a.nodeOn {
		sum := sha256.Sum256([]byte(c.Node))
		if subtle.ConstantTimeCompare(sum[:], a.node[:]) == 1 {
			return Principal{Node: true}, nil
		}
		return Principal{}, fmt.Errorf("%w: the node credential in %s is not this cluster's", ErrUnauthenticated, NodeHeader)
	}
	if need.Peer {
		if a.peerOn && c.Peer != "" {
			sum := sha256.Sum256([]byte(c.Peer))
			if subtle.ConstantTimeCompare(sum[:], a.peer[:]) == 1 {
				return Principal{Peer: true}, nil
			}
			return Principal{}, fmt.Errorf("%w: the peer credential in %s is not this cluster's", ErrUnauthenticated, PeerHeader)
		}
		if need.Role == None {
			if !a.peerOn && !a.tokensOn {
				return Principal{Peer: true}, nil // authentication is off
			}
			// A known client token is an authenticated caller that may
			// not make the call; anything else is not authenticated.
			code := ErrUnauthenticated
			if a.tokensOn && c.Bearer != "" {
				a.mu.RLock()
				known := lookup(a.tokens, c.Bearer) != nil
				a.mu.RUnlock()
				if known {
					code = ErrDenied
				}
			}
			if !a.peerOn {
				return Principal{}, fmt.Errorf("%w: %s is a cluster-to-cluster call and this server has no peer credential (--peer-credential-file)", code, c.Method)
			}
			return Principal{}, fmt.Errorf("%w: %s is a cluster-to-cluster call; it needs the peer credential in %s, and no client token can stand in for it", code, c.Method, PeerHeader)
		}
	}
	return a.CheckToken(c.Bearer, need.Role, c.Method)
}

// CheckToken checks a client token for something that needs role need
// (what names it in messages). With client authentication off it allows
// everything.
func (a *Authenticator) CheckToken(bearer string, need Role, what string) (Principal, error) {
	if !a.tokensOn {
		return Principal{}, nil
	}
	if bearer == "" {
		return Principal{}, fmt.Errorf("%w: %s needs a bearer token in the authorization header", ErrUnauthenticated, what)
	}
	a.mu.RLock()
	t := lookup(a.tokens, bearer)
	a.mu.RUnlock()
	if t == nil {
		return Principal{}, fmt.Errorf("%w: unknown token", ErrUnauthenticated)
	}
	if t.Role < need {
		return Principal{}, fmt.Errorf("%w: %s needs role %s; the token (line %d) has %s", ErrDenied, what, need, t.Line, t.Role)
	}
	return Principal{Token: t}, nil
}

// Limited says whether the principal's token covers only some instances,
// so a call's instances must be looked at (AllowsInstance).
func (p Principal) Limited() bool { return p.Token != nil && !p.Token.Unrestricted() }

// AllowsInstance checks the instances a request names against the token.
// A token limited to some instances may make only calls that name
// instances, all of them its own.
func (p Principal) AllowsInstance(method string, instances []string) error {
	if !p.Limited() {
		return nil
	}
	if len(instances) == 0 {
		return fmt.Errorf("%w: %s names no instance, and the token (line %d) is limited to %s", ErrDenied, method, p.Token.Line, strings.Join(p.Token.Instances, ", "))
	}
	for _, in := range instances {
		if !p.Token.Allows(in) {
			return fmt.Errorf("%w: the token (line %d) does not cover instance %q", ErrDenied, p.Token.Line, in)
		}
	}
	return nil
}
