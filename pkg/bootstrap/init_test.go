package bootstrap

import (
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestInitRefusesS3CA: `steward init` with a backup.s3.caFile that does
// not verify the S3 server (a certificate of another CA) is refused with
// one error naming the file, the endpoint and the unknown authority, and
// writes nothing: no directory, no spec, no CA, no join file.
func TestInitRefusesS3CA(t *testing.T) {
	pkiDir := t.TempDir()
	if err := pki.Ensure(pkiDir, "s3", nil); err != nil {
		t.Fatal(err)
	}
	f := pki.FilesIn(pkiDir)
	cert, err := tls.LoadX509KeyPair(f.ServerCert, f.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	otherDir := t.TempDir()
	if err := pki.Ensure(otherDir, "other", nil); err != nil {
		t.Fatal(err)
	}
	otherCA := pki.FilesIn(otherDir).CA

	dir := filepath.Join(t.TempDir(), "steward")
	o := InitOptions{
		HostsOptions: spec.HostsOptions{Hosts: []spec.Host{{Name: "h1", Address: "10.0.0.11"}, {Name: "h2", Address: "10.0.0.12"}, {Name: "h3", Address: "10.0.0.13"}}},
		S3:           &spec.S3{Endpoint: srv.URL, Bucket: "backups", CAFile: otherCA},
	}
	_, _, err = Init(t.Context(), dir, o, progress.Func(nil))
	if !errors.Is(err, backup.ErrS3CA) {
		t.Fatalf("init with another CA: %v, want backup.ErrS3CA", err)
	}
	for _, want := range []string{otherCA, srv.URL, "unknown authority"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused init wrote %s: %v", dir, err)
	}

	o.S3.CAFile = f.CA
	if _, _, err := Init(t.Context(), dir, o, progress.Func(nil)); err != nil {
		t.Fatalf("init with the server's CA: %v", err)
	}
}
