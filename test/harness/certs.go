package harness

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/pkg/pki"
)

// CertsList runs `steward certs list -o json` and maps each certificate by name.
func CertsList(e *Env) map[string]pki.CertInfo {
	e.TB.Helper()
	out := e.MustRun("certs", "list", "-o", "json")
	var inv []pki.CertInfo
	if err := json.Unmarshal([]byte(out), &inv); err != nil {
		e.TB.Fatalf("parse certs list: %v\n%s", err, out)
	}
	m := map[string]pki.CertInfo{}
	for _, i := range inv {
		m[i.Name] = i
	}
	return m
}

// RotationClient issues the client certificate "writer" (recorded under
// pki/clients, and a copy as the current CA issued it kept in old) and
// returns a client of every member that re-reads pki/ca.crt and the
// recorded certificate at each handshake, as a client that follows a CA
// rotation does; with the CA file as it was before.
func RotationClient(t *testing.T, e *Env) (cli *clientv3.Client, oldCA []byte, old string) {
	t.Helper()
	s := e.Spec()
	dir := s.CertDir(e.Dir)
	oldCA, err := os.ReadFile(filepath.Join(dir, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	old = filepath.Join(t.TempDir(), "old")
	e.MustRun("certs", "issue-client", "writer", "--out", old)
	var eps []string
	for _, m := range s.Members {
		eps = append(eps, m.ClientURL)
	}
	tc := FollowingTLS(filepath.Join(dir, pki.CACert), filepath.Join(dir, pki.ClientsDir, "writer.crt"), filepath.Join(dir, pki.ClientsDir, "writer.key"))
	cli, err = clientv3.New(clientv3.Config{Endpoints: eps, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, oldCA, old
}
