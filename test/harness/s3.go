package harness

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// S3 is a real S3-compatible server (versitygw, posix backend) on loopback.
type S3 struct {
	Endpoint        string
	Bucket          string
	CredentialsFile string
	Dir             string
	// CAFile is the PEM bundle of the private CA that signed the server's
	// certificate (StartS3TLSAt); empty for a plain-HTTP server.
	CAFile string
}

// VersityGW returns the versitygw binary built by hack/build-versitygw.sh;
// its absence fails the test.
func VersityGW(tb testing.TB) string {
	p := os.Getenv("STEWARD_TEST_VERSITYGW")
	if p == "" {
		p = filepath.Join(RepoRoot(tb), ".cache", "bin", "versitygw")
	}
	if _, err := os.Stat(p); err != nil {
		tb.Fatalf("S3 server %s is missing: run `make s3-server` (hack/build-versitygw.sh)", p)
	}
	return p
}

// StartS3 starts an S3 server with one bucket and a credentials file on a
// loopback address of its own; it stops when the test ends.
func StartS3(tb testing.TB) *S3 {
	tb.Helper()
	// A loopback address of its own (LoopbackAddr), held until after
	// the server stops (cleanups run last first).
	return StartS3At(tb, LoopbackAddr(tb))
}

// StartS3At is StartS3 listening on host (for instance a Network's bridge
// address, which every host of a multi-host test reaches).
func StartS3At(tb testing.TB, host string) *S3 {
	tb.Helper()
	return startS3(tb, host, false)
}

// StartS3TLSAt is StartS3At serving https with a certificate for host
// signed by a CA of its own (pkg/pki), whose certificate is S3.CAFile: a
// server no system root verifies.
func StartS3TLSAt(tb testing.TB, host string) *S3 {
	tb.Helper()
	return startS3(tb, host, true)
}

func startS3(tb testing.TB, host string, withTLS bool) *S3 {
	tb.Helper()
	bin := VersityGW(tb)
	dir, err := os.MkdirTemp("", "s3-")
	if err != nil {
		tb.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	bucket := "etcd-backups"
	if err := os.MkdirAll(filepath.Join(root, bucket), 0o700); err != nil {
		tb.Fatal(err)
	}
	port, err := spec.FreePort(host)()
	if err != nil {
		tb.Fatal(err)
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	const ak, sk = "steward-test", "steward-test-secret-key"
	// out is written by exec's copying goroutine until Wait returns; read
	// it only after exited is closed.
	var out bytes.Buffer
	args := []string{"--port", addr, "--access", ak, "--secret", sk}
	endpoint := "http://" + addr
	var caFile string
	client := http.DefaultClient
	if withTLS {
		pkiDir := filepath.Join(dir, "pki")
		if err := pki.Ensure(pkiDir, "s3-private-ca", []string{host}); err != nil {
			tb.Fatal(err)
		}
		f := pki.FilesIn(pkiDir)
		args = append(args, "--cert", f.ServerCert, "--key", f.ServerKey)
		endpoint = "https://" + addr
		caFile = f.CA
		pool, err := pki.CAPool(f.CA)
		if err != nil {
			tb.Fatal(err)
		}
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	}
	args = append(args, "posix", root)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = os.RemoveAll(dir)
	})
	creds := filepath.Join(dir, "s3.env")
	if err := os.WriteFile(creds, []byte(fmt.Sprintf("AWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n", ak, sk)), 0o600); err != nil {
		tb.Fatal(err)
	}
	Eventually(tb, 20*time.Second, 50*time.Millisecond, "versitygw to answer on "+addr, func() error {
		select {
		case <-exited:
			tb.Fatalf("versitygw exited at start: %s", out.String())
		default:
		}
		resp, err := client.Get(endpoint)
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
	return &S3{Endpoint: endpoint, Bucket: bucket, CredentialsFile: creds, Dir: root, CAFile: caFile}
}
