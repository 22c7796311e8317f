package backup

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/pki"
)

// tlsServer serves https on listen with a certificate for names (and
// 127.0.0.1, localhost: pki.Ensure), signed by a CA of its own; it returns
// the endpoint and that CA's file.
func tlsServer(t *testing.T, listen string, names ...string) (endpoint, caFile string) {
	t.Helper()
	dir := t.TempDir()
	if err := pki.Ensure(dir, "s3-test", names); err != nil {
		t.Fatal(err)
	}
	f := pki.FilesIn(dir)
	cert, err := tls.LoadX509KeyPair(f.ServerCert, f.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	l, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener.Close()
	srv.Listener = l
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, f.CA
}

// TestCheckS3Server: the CA bundle is the only trust, and each way it
// fails to verify the server is named with the file and the endpoint.
func TestCheckS3Server(t *testing.T) {
	endpoint, ca := tlsServer(t, "127.0.0.1:0", "127.0.0.1")
	_, otherCA := tlsServer(t, "127.0.0.1:0", "127.0.0.1")
	misnamed, misnamedCA := tlsServer(t, "127.0.0.2:0", "10.255.255.1")
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not-pem.crt")
	keyOnly := filepath.Join(dir, "key.pem")
	for p, b := range map[string]string{
		notPEM:  "this is not a certificate\n",
		keyOnly: "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n",
	} {
		if err := os.WriteFile(p, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	plain := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer plain.Close()
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "https://" + l.Addr().String()
	l.Close()

	if err := CheckS3Server(t.Context(), endpoint, ca, 5*time.Second); err != nil {
		t.Fatalf("the server's own CA: %v", err)
	}
	for _, tc := range []struct {
		name, endpoint, ca string
		want               error
		says               []string
	}{
		{"another CA", endpoint, otherCA, ErrS3CA, []string{otherCA, endpoint, "unknown authority"}},
		{"name mismatch", misnamed, misnamedCA, ErrS3CA, []string{misnamedCA, misnamed, "name mismatch", "10.255.255.1", "127.0.0.2"}},
		{"missing file", endpoint, filepath.Join(dir, "missing.crt"), ErrS3CA, []string{"missing.crt", endpoint, "no such file"}},
		{"not PEM", endpoint, notPEM, ErrS3CA, []string{notPEM, endpoint, "not PEM"}},
		{"a key, not a certificate", endpoint, keyOnly, ErrS3CA, []string{keyOnly, "not a CERTIFICATE"}},
		{"http endpoint", "http://" + strings.TrimPrefix(plain.URL, "http://"), ca, ErrS3CA, []string{ca, "not https://"}},
		{"no TLS at the endpoint", "https://" + strings.TrimPrefix(plain.URL, "http://"), ca, ErrS3CA, []string{ca, "TLS handshake failed"}},
		{"unreachable", closed, ca, ErrS3Unreachable, []string{ca, closed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckS3Server(t.Context(), tc.endpoint, tc.ca, 5*time.Second)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			t.Log(err)
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q does not say %q", err, s)
				}
			}
		})
	}
}

// TestS3StoreTrustsOnlyItsCA: a store with a CA file trusts that CA
// instead of the system roots (another CA's server is refused).
func TestS3StoreTrustsOnlyItsCA(t *testing.T) {
	endpoint, _ := tlsServer(t, "127.0.0.1:0", "127.0.0.1")
	_, otherCA := tlsServer(t, "127.0.0.1:0", "127.0.0.1")
	t.Setenv("AWS_ACCESS_KEY_ID", "a")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "b")
	_, err := NewS3Store(t.Context(), S3Config{Endpoint: endpoint, Bucket: "backups", CAFile: otherCA})
	if err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("a store trusting another CA reached the server: %v", err)
	}
}

func TestParseCABundle(t *testing.T) {
	dir := t.TempDir()
	if err := pki.Ensure(dir, "x", []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(pki.FilesIn(dir).CA)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := os.ReadFile(pki.FilesIn(dir).ServerCert)
	if err != nil {
		t.Fatal(err)
	}
	if certs, err := ParseCABundle(append(append([]byte("\n"), ca...), leaf...)); err != nil || len(certs) != 2 {
		t.Fatalf("a bundle of two: %d, %v", len(certs), err)
	}
	for name, b := range map[string][]byte{
		"empty":         nil,
		"white space":   []byte(" \n\t"),
		"garbage after": append(append([]byte{}, ca...), "trailing"...),
		"truncated":     ca[:len(ca)/2],
		"bad DER":       []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
		"too large":     make([]byte, MaxCABundle+1),
	} {
		if _, err := ParseCABundle(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
