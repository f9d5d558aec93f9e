// Package objstore opens the shared object storage a cluster's nodes keep
// their lower-level SSTables in, from a URL: an S3-compatible bucket
// (s3://bucket/prefix, through minio-go) or a directory every node mounts
// (file:///dir). It speaks HTTP, so it sits with the transports: only the
// commands import it, and hand the store to the engine
// (storage.SharedOptions.Store).
package objstore

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/ebbtable/ebbtable/storage"
)

// Location is a parsed --shared-storage URL.
type Location struct {
	// Scheme is "s3" or "file".
	Scheme string
	// Bucket and Prefix locate the objects of an s3 URL; Prefix is empty
	// or ends with "/".
	Bucket, Prefix string
	// Dir is a file URL's directory.
	Dir string
}

// String is the URL in its canonical form, without secrets: the locator
// Pebble records for the store.
func (l Location) String() string {
	if l.Scheme == "file" {
		return "file://" + l.Dir
	}
	return "s3://" + l.Bucket + "/" + l.Prefix
}

// ParseURL reads s3://bucket[/prefix] or file:///absolute/dir.
func ParseURL(raw string) (Location, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Location{}, fmt.Errorf("ebbtable: shared storage URL %q: %w", raw, err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return Location{}, fmt.Errorf("ebbtable: shared storage URL %q: a file URL names a local directory (file:///dir), not host %q", raw, u.Host)
		}
		if u.Path == "" || !strings.HasPrefix(u.Path, "/") {
			return Location{}, fmt.Errorf("ebbtable: shared storage URL %q: want file:///absolute/dir", raw)
		}
		if u.RawQuery != "" {
			return Location{}, fmt.Errorf("ebbtable: shared storage URL %q: a file URL takes no query", raw)
		}
		return Location{Scheme: "file", Dir: u.Path}, nil
	case "s3":
		if u.Host == "" {
			return Location{}, fmt.Errorf("ebbtable: shared storage URL %q: want s3://bucket/prefix", raw)
		}
		if u.User != nil || u.RawQuery != "" {
			return Location{}, fmt.Errorf("ebbtable: shared storage URL %q: give credentials and the endpoint by flags or the AWS_* environment, not in the URL", raw)
		}
		p := strings.TrimPrefix(u.Path, "/")
		if p != "" && !strings.HasSuffix(p, "/") {
			p += "/"
		}
		return Location{Scheme: "s3", Bucket: u.Host, Prefix: p}, nil
	}
	return Location{}, fmt.Errorf("ebbtable: shared storage URL %q: the scheme must be s3 or file", raw)
}

// Config holds the S3 settings a URL leaves out. Empty fields are taken
// from the environment the usual AWS way.
type Config struct {
	// Endpoint is the S3 service: host:port, or a URL whose http scheme
	// turns TLS off. Empty: AWS_ENDPOINT_URL_S3, then AWS_ENDPOINT_URL,
	// then s3.amazonaws.com.
	Endpoint string
	// Region; empty: AWS_REGION, then AWS_DEFAULT_REGION (then whatever
	// the service answers).
	Region string
	// AccessKeyID, SecretAccessKey and SessionToken; empty:
	// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN.
	AccessKeyID, SecretAccessKey, SessionToken string
	// Getenv reads the environment; nil means os.Getenv (tests replace it).
	Getenv func(string) string
}

func (c Config) withEnv() Config {
	get := c.Getenv
	if get == nil {
		get = os.Getenv
	}
	first := func(v string, keys ...string) string {
		for _, k := range keys {
			if v != "" {
				return v
			}
			v = get(k)
		}
		return v
	}
	c.Endpoint = first(c.Endpoint, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
	c.Region = first(c.Region, "AWS_REGION", "AWS_DEFAULT_REGION")
	c.AccessKeyID = first(c.AccessKeyID, "AWS_ACCESS_KEY_ID")
	c.SecretAccessKey = first(c.SecretAccessKey, "AWS_SECRET_ACCESS_KEY")
	c.SessionToken = first(c.SessionToken, "AWS_SESSION_TOKEN")
	return c
}

// Open opens the store a URL names, checking that it can be reached (the
// bucket exists, the directory can be created). The locator to give
// storage.SharedOptions is loc.String().
func Open(raw string, cfg Config) (storage.ObjectStore, Location, error) {
	loc, err := ParseURL(raw)
	if err != nil {
		return nil, Location{}, err
	}
	switch loc.Scheme {
	case "file":
		st, err := storage.SharedDir(loc.Dir)
		return st, loc, err
	default:
		st, err := OpenS3(loc, cfg)
		return st, loc, err
	}
}

// errNotExist is what the S3 store returns for a missing object.
var errNotExist = errors.New("ebbtable: shared object does not exist")
