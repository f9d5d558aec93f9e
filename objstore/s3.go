package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/ebbtable/ebbtable/storage"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3 is an object store in an S3 bucket under a prefix: Pebble's remote
// storage on minio-go. Reads are ranged GETs of exactly the bytes asked
// for; writes stream (multipart for large objects); an object exists,
// whole, once its writer's Close returns nil.
type S3 struct {
	client *minio.Client
	bucket string
	prefix string
	ctx    context.Context // ends with Close: calls without a context of their own
	stop   context.CancelFunc
}

var _ storage.ObjectStore = (*S3)(nil)

// OpenS3 connects to the bucket of an s3 location and checks it exists.
func OpenS3(loc Location, cfg Config) (*S3, error) {
	return openS3(loc, cfg, nil)
}

// openS3 takes a transport for tests (nil: minio's default).
func openS3(loc Location, cfg Config, transport http.RoundTripper) (*S3, error) {
	if loc.Scheme != "s3" || loc.Bucket == "" {
		return nil, fmt.Errorf("ebbtable: not an s3 location: %s", loc)
	}
	cfg = cfg.withEnv()
	endpoint, secure := "s3.amazonaws.com", true
	if e := cfg.Endpoint; e != "" {
		if strings.Contains(e, "://") {
			u, err := url.Parse(e)
			if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || (u.Path != "" && u.Path != "/") {
				return nil, fmt.Errorf("ebbtable: S3 endpoint %q: want host:port or http(s)://host:port", e)
			}
			endpoint, secure = u.Host, u.Scheme == "https"
		} else {
			endpoint = e
		}
	}
	var creds *credentials.Credentials
	if cfg.AccessKeyID != "" || cfg.SecretAccessKey != "" {
		creds = credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)
	} else {
		creds = credentials.NewStatic("", "", "", credentials.SignatureAnonymous)
	}
	client, err := minio.New(endpoint, &minio.Options{Creds: creds, Secure: secure, Region: cfg.Region,
		Transport: transport, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return nil, fmt.Errorf("ebbtable: S3 endpoint %s: %w", endpoint, err)
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &S3{client: client, bucket: loc.Bucket, prefix: loc.Prefix, ctx: ctx, stop: stop}
	ok, err := client.BucketExists(ctx, loc.Bucket)
	if err != nil {
		stop()
		return nil, fmt.Errorf("ebbtable: S3 bucket %s at %s: %w", loc.Bucket, endpoint, err)
	}
	if !ok {
		stop()
		return nil, fmt.Errorf("ebbtable: S3 bucket %s does not exist at %s; create it first", loc.Bucket, endpoint)
	}
	return s, nil
}

// Close ends calls in progress.
func (s *S3) Close() error {
	s.stop()
	return nil
}

func (s *S3) key(name string) string { return s.prefix + name }

// notExist maps S3's missing-object answers to errNotExist.
func notExist(err error) error {
	if err == nil {
		return nil
	}
	r := minio.ToErrorResponse(err)
	if r.Code == minio.NoSuchKey || r.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%w: %w", errNotExist, err)
	}
	return err
}

// ReadObject opens an object for ranged reads.
func (s *S3) ReadObject(ctx context.Context, name string) (storage.ObjectReader, int64, error) {
	info, err := s.client.StatObject(ctx, s.bucket, s.key(name), minio.StatObjectOptions{})
	if err != nil {
		return nil, 0, notExist(err)
	}
	return &s3Reader{s: s, key: s.key(name), size: info.Size, etag: info.ETag}, info.Size, nil
}

type s3Reader struct {
	s    *S3
	key  string
	size int64
	etag string
}

// ReadAt fetches exactly [off, off+len(p)) of the object, or fails.
func (r *s3Reader) ReadAt(ctx context.Context, p []byte, off int64) error {
	if len(p) == 0 {
		return nil
	}
	if off < 0 || off+int64(len(p)) > r.size {
		return fmt.Errorf("ebbtable: read of %d bytes at %d past the end of %s (%d bytes)", len(p), off, r.key, r.size)
	}
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(off, off+int64(len(p))-1); err != nil {
		return err
	}
	if r.etag != "" {
		// The object must not have been replaced since it was opened.
		if err := opts.SetMatchETag(r.etag); err != nil {
			return err
		}
	}
	obj, err := r.s.client.GetObject(ctx, r.s.bucket, r.key, opts)
	if err != nil {
		return notExist(err)
	}
	defer obj.Close()
	if _, err := io.ReadFull(obj, p); err != nil {
		return fmt.Errorf("ebbtable: read %s at %d: %w", r.key, off, notExist(err))
	}
	return nil
}

func (r *s3Reader) Close() error { return nil }

// partSize is the size of a multipart upload's parts; an object no larger
// goes in one PUT.
const partSize = 16 << 20

// CreateObject returns a writer for a new object; it exists, whole, once
// Close returns nil. Objects up to partSize are buffered and sent in one
// PUT (reference markers are empty); larger ones stream as a multipart
// upload.
func (s *S3) CreateObject(name string) (io.WriteCloser, error) {
	return &s3Writer{s: s, key: s.key(name)}, nil
}

type s3Writer struct {
	s    *S3
	key  string
	buf  []byte
	pw   *io.PipeWriter // streaming: past partSize
	done chan error
	err  error
}

func (w *s3Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.pw == nil {
		if len(w.buf)+len(p) <= partSize {
			w.buf = append(w.buf, p...)
			return len(p), nil
		}
		pr, pw := io.Pipe()
		w.pw, w.done = pw, make(chan error, 1)
		go func() {
			_, err := w.s.client.PutObject(w.s.ctx, w.s.bucket, w.key, pr, -1, w.s.putOptions())
			pr.CloseWithError(err) // unblocks a writer if the upload failed
			w.done <- err
		}()
		buf := w.buf
		w.buf = nil
		if _, err := w.pw.Write(buf); err != nil {
			w.err = err
			return 0, err
		}
	}
	n, err := w.pw.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}

func (w *s3Writer) Close() error {
	if w.pw != nil {
		w.pw.Close()
		if err := <-w.done; err != nil {
			return fmt.Errorf("ebbtable: upload %s: %w", w.key, err)
		}
		return w.err
	}
	if w.err != nil {
		return w.err
	}
	_, err := w.s.client.PutObject(w.s.ctx, w.s.bucket, w.key, bytes.NewReader(w.buf), int64(len(w.buf)), w.s.putOptions())
	if err != nil {
		return fmt.Errorf("ebbtable: upload %s: %w", w.key, err)
	}
	return nil
}

func (s *S3) putOptions() minio.PutObjectOptions {
	return minio.PutObjectOptions{ContentType: "application/octet-stream", PartSize: partSize,
		// Parts are sent with their length (not aws-chunked), which every
		// S3-compatible service accepts.
		DisableContentSha256: true}
}

// List lists object names under prefix (trimmed), grouping names by the
// part up to delimiter when one is given.
func (s *S3) List(prefix, delimiter string) ([]string, error) {
	full := s.key(prefix)
	seen := map[string]bool{}
	var out []string
	for obj := range s.client.ListObjects(s.ctx, s.bucket, minio.ListObjectsOptions{Prefix: full, Recursive: true}) {
		if obj.Err != nil {
			return nil, obj.Err
		}
		name := strings.TrimPrefix(obj.Key, full)
		if delimiter != "" {
			if i := strings.Index(name, delimiter); i >= 0 {
				name = name[:i]
			}
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out, nil
}

// Delete removes an object (a missing one is not an error to S3).
func (s *S3) Delete(name string) error {
	return notExist(s.client.RemoveObject(s.ctx, s.bucket, s.key(name), minio.RemoveObjectOptions{}))
}

// Size returns an object's length.
func (s *S3) Size(name string) (int64, error) {
	info, err := s.client.StatObject(s.ctx, s.bucket, s.key(name), minio.StatObjectOptions{})
	if err != nil {
		return 0, notExist(err)
	}
	return info.Size, nil
}

// IsNotExistError says whether err means a missing object.
func (s *S3) IsNotExistError(err error) bool { return errors.Is(err, errNotExist) }
