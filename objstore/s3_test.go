package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ebbtable/ebbtable/storage"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// fakeS3 is an in-process S3 service on loopback holding one bucket; it
// counts the GETs it serves.
type fakeS3 struct {
	url  string
	gets atomic.Int64
	stop func()
}

func startFakeS3(t *testing.T, bucket string) *fakeS3 {
	t.Helper()
	be := s3mem.New()
	if err := be.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	f := &fakeS3{}
	h := gofakes3.New(be, gofakes3.WithLogger(gofakes3.DiscardLog())).Server()
	srv := httptest.NewServer(countGets(h, &f.gets))
	f.url, f.stop = srv.URL, srv.Close
	t.Cleanup(srv.Close)
	return f
}

func (f *fakeS3) config() Config {
	return Config{Endpoint: f.url, AccessKeyID: "test", SecretAccessKey: "test-secret", Region: "us-east-1",
		Getenv: func(string) string { return "" }}
}

func openFake(t *testing.T, f *fakeS3, url string) *S3 {
	t.Helper()
	loc, err := ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenS3(loc, f.config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func put(t *testing.T, s storage.ObjectStore, name string, data []byte) {
	t.Helper()
	w, err := s.CreateObject(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestS3Store holds the adapter to the contract Pebble relies on: ranged
// reads of exactly the bytes asked, reads past the end refused, listing by
// prefix with the prefix trimmed, sizes, deletes and not-found errors; two
// stores on different prefixes of one bucket never see each other.
func TestS3Store(t *testing.T) {
	ctx := context.Background()
	f := startFakeS3(t, "bkt")
	s := openFake(t, f, "s3://bkt/node-data")
	other := openFake(t, f, "s3://bkt/other/")

	data := make([]byte, 3<<20+17)
	for i := range data {
		data[i] = byte(i * 7)
	}
	put(t, s, "000001.sst", data)
	put(t, s, "000001.sst.ref.2.000001", nil)
	put(t, s, "000002.sst", []byte("small"))
	put(t, other, "000001.sst", []byte("not mine"))

	r, size, err := s.ReadObject(ctx, "000001.sst")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if size != int64(len(data)) {
		t.Fatalf("size %d, want %d", size, len(data))
	}
	before := f.gets.Load()
	for _, c := range []struct{ off, n int }{{0, 10}, {1 << 20, 4096}, {len(data) - 5, 5}, {12345, 2 << 20}} {
		p := make([]byte, c.n)
		if err := r.ReadAt(ctx, p, int64(c.off)); err != nil {
			t.Fatalf("ReadAt(%d, %d): %v", c.off, c.n, err)
		}
		if !bytes.Equal(p, data[c.off:c.off+c.n]) {
			t.Fatalf("ReadAt(%d, %d) returned other bytes", c.off, c.n)
		}
	}
	if n := f.gets.Load() - before; n != 4 {
		t.Errorf("4 ranged reads made %d GETs", n)
	}
	if err := r.ReadAt(ctx, make([]byte, 10), int64(len(data)-5)); err == nil {
		t.Errorf("a read past the end succeeded")
	}

	names, err := s.List("", "")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if fmt.Sprint(names) != "[000001.sst 000001.sst.ref.2.000001 000002.sst]" {
		t.Errorf("List: %v", names)
	}
	if names, _ := s.List("000001.sst.ref.", ""); fmt.Sprint(names) != "[2.000001]" {
		t.Errorf("List(refs): %v, want the prefix trimmed", names)
	}
	if names, _ := s.List("000001", "."); !slices.Contains(names, "") || len(names) != 1 {
		t.Errorf("List with a delimiter: %v", names)
	}
	if n, err := s.Size("000002.sst"); err != nil || n != 5 {
		t.Errorf("Size: %d, %v", n, err)
	}
	if err := s.Delete("000002.sst"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Size("000002.sst")
	if !s.IsNotExistError(err) {
		t.Errorf("Size of a deleted object: %v, want a not-exist error", err)
	}
	if _, _, err := s.ReadObject(ctx, "nope"); !s.IsNotExistError(err) {
		t.Errorf("ReadObject of a missing object: %v, want a not-exist error", err)
	}
	if s.IsNotExistError(errors.New("other")) {
		t.Errorf("IsNotExistError is true of any error")
	}
	if names, _ := other.List("", ""); fmt.Sprint(names) != "[000001.sst]" {
		t.Errorf("the other prefix lists %v", names)
	}
}

// TestS3Refusals: a missing bucket, a bad endpoint or URL is a clear error.
func TestS3Refusals(t *testing.T) {
	f := startFakeS3(t, "bkt")
	loc, _ := ParseURL("s3://missing/x")
	if _, err := OpenS3(loc, f.config()); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing bucket: %v", err)
	}
	cfg := f.config()
	cfg.Endpoint = "ftp://127.0.0.1:1"
	loc, _ = ParseURL("s3://bkt/x")
	if _, err := OpenS3(loc, cfg); err == nil || !strings.Contains(err.Error(), "endpoint") {
		t.Errorf("bad endpoint: %v", err)
	}
	for _, bad := range []string{"s3:///x", "file://host/dir", "file:relative", "gs://b/p", "s3://key:secret@b/p", "::"} {
		if _, err := ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q) accepted", bad)
		}
	}
}

// TestParseURL reads the two forms, and Config takes the AWS environment.
func TestParseURL(t *testing.T) {
	for in, want := range map[string]string{
		"s3://bkt":            "s3://bkt/",
		"s3://bkt/a/b":        "s3://bkt/a/b/",
		"file:///var/shared":  "file:///var/shared",
		"file://localhost/sh": "file:///sh",
	} {
		loc, err := ParseURL(in)
		if err != nil || loc.String() != want {
			t.Errorf("ParseURL(%q) = %v, %v; want %s", in, loc, err, want)
		}
	}
	env := map[string]string{"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1",
		"AWS_ACCESS_KEY_ID": "ak", "AWS_SECRET_ACCESS_KEY": "sk"}
	c := Config{Getenv: func(k string) string { return env[k] }}.withEnv()
	if c.Endpoint != env["AWS_ENDPOINT_URL"] || c.Region != "eu-west-1" || c.AccessKeyID != "ak" || c.SecretAccessKey != "sk" {
		t.Errorf("config from the environment: %+v", c)
	}
	c = Config{Endpoint: "127.0.0.1:1", Getenv: func(k string) string { return env[k] }}.withEnv()
	if c.Endpoint != "127.0.0.1:1" {
		t.Errorf("a flag loses to the environment: %+v", c)
	}
}

// TestOpenFileURL opens a shared directory through the same entry point.
func TestOpenFileURL(t *testing.T) {
	dir := t.TempDir() + "/shared"
	st, loc, err := Open("file://"+dir, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if loc.String() != "file://"+dir {
		t.Errorf("locator %s", loc)
	}
	put(t, st, "x", []byte("hello"))
	if n, err := st.Size("x"); err != nil || n != 5 {
		t.Errorf("Size: %d, %v", n, err)
	}
	var _ io.Closer = st
}
