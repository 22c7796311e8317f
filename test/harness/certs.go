package harness

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
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

// RequireRotatedClients checks every member's client URL after a finished
// CA rotation, with the client certificate "writer" RotationClient issued
// (its copy from before the rotation in old, the reissued one in
// dir/clients, one key): the old CA's certificate is refused, the reissued
// one accepted with the new CA (dir's ca.crt) as the client's root, and a
// client trusting only the old CA (old's ca.crt) refuses the member. A
// count-only read under prefix proves the acceptance.
func RequireRotatedClients(t *testing.T, members []spec.Member, old, dir, prefix string) {
	t.Helper()
	get := func(ep, caFile, cert, key string) error {
		tc, err := pki.ClientTLSFiles(caFile, cert, key)
		if err != nil {
			t.Fatal(err)
		}
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, TLS: tc, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err = c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err
	}
	oldCAFile, newCAFile := filepath.Join(old, pki.CACert), filepath.Join(dir, pki.CACert)
	oldCert, oldKey := filepath.Join(old, "writer.crt"), filepath.Join(old, "writer.key")
	reissued := filepath.Join(dir, pki.ClientsDir, "writer.crt")
	for _, m := range members {
		if err := get(m.ClientURL, newCAFile, oldCert, oldKey); err == nil {
			t.Errorf("%s accepted a client certificate of the old CA after the rotation", m.Name)
		}
		if err := get(m.ClientURL, newCAFile, reissued, oldKey); err != nil {
			t.Errorf("%s refused the reissued client certificate (new CA as the client's root): %v", m.Name, err)
		}
		if err := get(m.ClientURL, oldCAFile, reissued, oldKey); err == nil {
			t.Errorf("a client trusting only the old CA still verifies %s after the rotation", m.Name)
		}
	}
}
