package cluster

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestOldAgentS3CA: an agent that predates ClusterFiles.S3CA decodes the
// hand-over strictly (unknown fields refused, as pkg/agent's decodeBody
// always did), so it refuses a spec with a CA rather than falling back to
// its system roots; the coordinator names why and what to do.
func TestOldAgentS3CA(t *testing.T) {
	type oldClusterFiles struct {
		Spec          string `json:"spec"`
		S3Credentials string `json:"s3Credentials,omitempty"`
		BackupKey     string `json:"backupKey,omitempty"`
		BackupAuthKey string `json:"backupAuthKey,omitempty"`
	}
	decode := func(f agentapi.ClusterFiles) error {
		b, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		var old oldClusterFiles
		if err := dec.Decode(&old); err != nil {
			// What the old agent answers (server.go: reply with badRequest).
			return &agentapi.APIError{Status: http.StatusBadRequest, Message: fmt.Sprintf("decode cluster files: %v", err)}
		}
		return nil
	}
	if err := oldAgentS3CA(decode(agentapi.ClusterFiles{Spec: "x", S3Credentials: "c"})); err != nil {
		t.Fatalf("a spec without a CA reaches an old agent: %v", err)
	}
	err := oldAgentS3CA(decode(agentapi.ClusterFiles{Spec: "x", S3CA: "pem"}))
	var ae *agentapi.APIError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "predates backup.s3.caFile") || !strings.Contains(err.Error(), "upgrade Steward on that host") {
		t.Fatalf("an old agent's refusal: %v", err)
	}
	other := &agentapi.APIError{Status: http.StatusBadRequest, Message: "cluster spec does not parse"}
	if err := oldAgentS3CA(other); err != other {
		t.Errorf("another refusal was rewritten: %v", err)
	}
}

// privateCAServer serves https on 127.0.0.1 with a certificate of a CA of
// its own; it returns the endpoint and that CA's file.
func privateCAServer(t *testing.T) (endpoint, caFile string) {
	t.Helper()
	dir := t.TempDir()
	if err := pki.Ensure(dir, "s3", nil); err != nil {
		t.Fatal(err)
	}
	f := pki.FilesIn(dir)
	cert, err := tls.LoadX509KeyPair(f.ServerCert, f.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, f.CA
}

// TestSaveSpecS3CA: a spec whose backup.s3.caFile does not verify the S3
// server (another CA, or not a certificate) is refused by SaveSpec, naming
// the file, the endpoint and what failed, and the spec on disk is
// unchanged; the server's own CA is saved.
func TestSaveSpecS3CA(t *testing.T) {
	endpoint, ca := privateCAServer(t)
	_, otherCA := privateCAServer(t)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not-pem.crt")
	if err := os.WriteFile(notPEM, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := 40000
	s, err := spec.NewDefault(spec.DefaultOptions{Name: "c1", Version: binaries.EmbeddedVersion(), Members: 1, StewardDir: dir,
		FreePort: func() (int, error) { port++; return port, nil }})
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Dir: dir, Spec: s}
	if err := s.Save(c.SpecPath()); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(c.SpecPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ca, says string }{{otherCA, "unknown authority"}, {notPEM, "not PEM"}} {
		next := s.Clone()
		next.Backup.S3 = &spec.S3{Endpoint: endpoint, Bucket: "backups", CAFile: tc.ca}
		err := c.SaveSpec(t.Context(), next)
		if !errors.Is(err, backup.ErrS3CA) {
			t.Fatalf("SaveSpec with caFile %s: %v, want backup.ErrS3CA", tc.ca, err)
		}
		for _, want := range []string{"backup.s3.caFile", tc.ca, endpoint, tc.says} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q does not say %q", err, want)
			}
		}
		if after, _ := os.ReadFile(c.SpecPath()); string(after) != string(before) || c.Spec.Backup.S3 != nil {
			t.Fatal("a refused SaveSpec changed the spec")
		}
	}
	next := s.Clone()
	next.Backup.S3 = &spec.S3{Endpoint: endpoint, Bucket: "backups", CAFile: ca}
	if err := c.SaveSpec(t.Context(), next); err != nil {
		t.Fatalf("SaveSpec with the server's CA: %v", err)
	}
}
