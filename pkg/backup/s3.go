package backup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config names an S3-compatible bucket. Credentials come from
// CredentialsFile (lines AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=...)
// or, when it is empty, from the environment variables of the same names.
// They are never logged.
type S3Config struct {
	// Endpoint is the server URL, e.g. https://s3.example.com or
	// http://127.0.0.1:7070.
	Endpoint        string `json:"endpoint"`
	Bucket          string `json:"bucket"`
	Prefix          string `json:"prefix,omitempty"`
	Region          string `json:"region,omitempty"`
	CredentialsFile string `json:"credentialsFile,omitempty"`
	// CAFile is a PEM bundle of the CA certificates to trust for a server
	// with a private CA, instead of the system roots.
	CAFile string `json:"caFile,omitempty"`
}

// S3Store keeps backups in an S3 bucket under a prefix. An S3 PUT (single or
// multipart) becomes visible only when complete, so Put is atomic.
type S3Store struct {
	c      *minio.Client
	bucket string
	prefix string
	desc   string
}

// NewS3Store connects to a bucket and checks that it exists.
func NewS3Store(ctx context.Context, cfg S3Config) (*S3Store, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("s3 endpoint %q: want http(s)://host[:port]", cfg.Endpoint)
	}
	if cfg.Bucket == "" {
		return nil, errors.New("s3 bucket is empty")
	}
	ak, sk, err := s3Credentials(cfg.CredentialsFile)
	if err != nil {
		return nil, err
	}
	opts := &minio.Options{
		Creds:        credentials.NewStaticV4(ak, sk, ""),
		Secure:       u.Scheme == "https",
		Region:       cfg.Region,
		BucketLookup: minio.BucketLookupPath,
	}
	if cfg.CAFile != "" {
		// The bundle's certificates are the only roots (LoadCABundle).
		pool, err := LoadCABundle(cfg.CAFile)
		if err != nil {
			return nil, err
		}
		opts.Transport = &http.Transport{TLSClientConfig: s3TLSConfig(pool)}
	}
	c, err := minio.New(u.Host, opts)
	if err != nil {
		return nil, fmt.Errorf("s3 client: %w", err)
	}
	ok, err := c.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("s3 bucket %s at %s: %w", cfg.Bucket, cfg.Endpoint, err)
	}
	if !ok {
		return nil, fmt.Errorf("s3 bucket %s does not exist at %s: create it first", cfg.Bucket, cfg.Endpoint)
	}
	prefix := strings.Trim(cfg.Prefix, "/")
	desc := fmt.Sprintf("s3 %s/%s", cfg.Endpoint, cfg.Bucket)
	if prefix != "" {
		desc += "/" + prefix
	}
	return &S3Store{c: c, bucket: cfg.Bucket, prefix: prefix, desc: desc}, nil
}

func s3Credentials(file string) (string, string, error) {
	if file == "" {
		ak, sk := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		if ak == "" || sk == "" {
			return "", "", errors.New("s3 credentials: set backup.s3.credentialsFile or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
		}
		return ak, sk, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return "", "", fmt.Errorf("s3 credentials: %w", err)
	}
	defer f.Close()
	var ak, sk string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(sc.Text(), "export ")), "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"'`)
		switch k {
		case "AWS_ACCESS_KEY_ID":
			ak = v
		case "AWS_SECRET_ACCESS_KEY":
			sk = v
		}
	}
	if ak == "" || sk == "" {
		return "", "", fmt.Errorf("s3 credentials file %s: want AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=... lines", file)
	}
	return ak, sk, nil
}

func (s *S3Store) String() string { return s.desc }

func (s *S3Store) key(name string) (string, error) {
	if name == "" || strings.Contains(name, "..") || strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("invalid backup object name %q", name)
	}
	if s.prefix == "" {
		return name, nil
	}
	return path.Join(s.prefix, name), nil
}

// Put uploads an object; it refuses to replace an existing one. It asks the
// server to refuse too (a conditional write, If-None-Match: *), so two
// writers racing for one name cannot both succeed on a server that honours
// it (AWS S3, MinIO). A server that does not honour it ignores the header
// (versitygw, the server the tests run, does): the check before the upload
// is then the only one, as it was before. A server that rejects the header
// as not implemented gets the upload again without it, when r can be
// rewound.
func (s *S3Store) Put(ctx context.Context, name string, r io.Reader) error {
	k, err := s.key(name)
	if err != nil {
		return err
	}
	if _, err := s.c.StatObject(ctx, s.bucket, k, minio.StatObjectOptions{}); err == nil {
		return fmt.Errorf("backup object %s already exists in %s", name, s.desc)
	} else if minio.ToErrorResponse(err).Code != "NoSuchKey" {
		return fmt.Errorf("s3 stat %s: %w", name, err)
	}
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", PartSize: 16 << 20}
	opts.SetMatchETagExcept("*")
	_, err = s.c.PutObject(ctx, s.bucket, k, r, -1, opts)
	if er := minio.ToErrorResponse(err); err != nil && (er.StatusCode == http.StatusNotImplemented || er.Code == "NotImplemented") {
		seeker, ok := r.(io.Seeker)
		if !ok {
			return fmt.Errorf("s3 put %s: the server does not implement conditional writes: %w", name, err)
		}
		if _, serr := seeker.Seek(0, io.SeekStart); serr != nil {
			return fmt.Errorf("s3 put %s: %w", name, serr)
		}
		_, err = s.c.PutObject(ctx, s.bucket, k, r, -1, minio.PutObjectOptions{ContentType: "application/octet-stream", PartSize: 16 << 20})
	}
	if err != nil {
		if er := minio.ToErrorResponse(err); er.StatusCode == http.StatusPreconditionFailed || er.Code == "PreconditionFailed" {
			return fmt.Errorf("backup object %s already exists in %s (written by another writer meanwhile)", name, s.desc)
		}
		return fmt.Errorf("s3 put %s: %w", name, err)
	}
	return nil
}

// Get opens an object.
func (s *S3Store) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	k, err := s.key(name)
	if err != nil {
		return nil, err
	}
	if _, err := s.c.StatObject(ctx, s.bucket, k, minio.StatObjectOptions{}); err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, fmt.Errorf("%w: %s in %s", ErrNotExist, name, s.desc)
		}
		return nil, fmt.Errorf("s3 stat %s: %w", name, err)
	}
	o, err := s.c.GetObject(ctx, s.bucket, k, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("s3 get %s: %w", name, err)
	}
	return o, nil
}

// List returns object names under prefix, sorted.
func (s *S3Store) List(ctx context.Context, prefix string) ([]string, error) {
	full := prefix
	if s.prefix != "" {
		full = s.prefix + "/" + prefix
	}
	var out []string
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: full, Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("s3 list %s: %w", s.desc, o.Err)
		}
		n := o.Key
		if s.prefix != "" {
			n = strings.TrimPrefix(n, s.prefix+"/")
		}
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// Delete removes an object; a missing one is not an error.
func (s *S3Store) Delete(ctx context.Context, name string) error {
	k, err := s.key(name)
	if err != nil {
		return err
	}
	if err := s.c.RemoveObject(ctx, s.bucket, k, minio.RemoveObjectOptions{}); err != nil && minio.ToErrorResponse(err).Code != "NoSuchKey" {
		return fmt.Errorf("s3 delete %s: %w", name, err)
	}
	return nil
}
