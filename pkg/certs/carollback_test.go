package certs

import (
	"bytes"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/pki"
)

// TestRotationRollback: a rotation stopped after its leaves were reissued
// by the next CA, rolled back on files. Trusting the old CA alone and
// retiring the next CA are refused before the leaves are the old CA's
// again, changing nothing. Then each leaf is the old CA's again with its
// key (a previous copy still valid put back as it was, one missing
// reissued by the old CA), with no CA after it, the next CA's leaf kept
// as NAME.crt.prev; ca.crt is the old CA alone; the next CA is moved
// aside, not deleted (its key still 0600), after which renewals and
// issue-client work again. Every phase run twice changes nothing the
// second time. A leaf of the rolled-back next CA alone no longer verifies
// against ca.crt.
func TestRotationRollback(t *testing.T) {
	dir := t.TempDir()
	if err := pki.Ensure(dir, "c1", []string{"10.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.IssueClient(dir, "c1", "writer", 0, "", pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	oldCA, _ := os.ReadFile(filepath.Join(dir, pki.CACert))
	oldServer, _ := os.ReadFile(filepath.Join(dir, pki.ServerCert))
	oldPeer, _ := os.ReadFile(filepath.Join(dir, pki.PeerCert))
	if err := RotationPrepare(dir, "c1", pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	if err := RotationTrustBoth(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := RotationReissue(dir, pki.Validity{}, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	next, _ := os.ReadFile(filepath.Join(dir, pki.CANextCert))
	nextKey, _ := os.ReadFile(filepath.Join(dir, pki.CANextKey))
	cross, _ := os.ReadFile(filepath.Join(dir, pki.CACross))
	newWriter, _ := os.ReadFile(filepath.Join(dir, pki.ClientsDir, "writer.crt"))
	// The peer's previous copy lost: it is reissued by the old CA instead.
	if err := os.Remove(filepath.Join(dir, pki.PeerCert+pki.PrevSuffix)); err != nil {
		t.Fatal(err)
	}

	bundle, _ := os.ReadFile(filepath.Join(dir, pki.CACert))
	if err := RollbackTrustOld(dir); !errors.Is(err, pki.ErrNotSignedByCA) {
		t.Errorf("trust the old CA alone before the leaves: %v, want ErrNotSignedByCA", err)
	}
	if err := RollbackRetire(dir); err == nil {
		t.Error("retire the next CA before ca.crt is the old CA alone: no error")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, pki.CACert)); !bytes.Equal(b, bundle) {
		t.Fatal("a refused rollback step changed ca.crt")
	}
	if !pki.RotationInProgress(dir) {
		t.Fatal("a refused retire moved the next CA")
	}

	rs, err := RollbackLeaves(dir, pki.Validity{}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 { // server, peer, client, clients/writer
		t.Fatalf("rolled back %d leaves, want 4: %+v", len(rs), rs)
	}
	if rs, err := RollbackLeaves(dir, pki.Validity{}, nil, time.Now()); err != nil || len(rs) != 0 {
		t.Fatalf("second rollback of the leaves: %+v, %v; want nothing to do", rs, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, pki.ServerCert)); !bytes.Equal(b, oldServer) {
		t.Error("server.crt is not its previous copy put back")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, pki.PeerCert)); bytes.Equal(b, oldPeer) {
		t.Error("peer.crt is its first copy, which was removed: want a reissue")
	}
	oldCAFile := filepath.Join(t.TempDir(), "old-ca.crt")
	if err := os.WriteFile(oldCAFile, oldCA, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{pki.ServerCert, pki.PeerCert, pki.ClientCert, filepath.Join(pki.ClientsDir, "writer.crt")} {
		b, _ := os.ReadFile(filepath.Join(dir, n))
		if c := strings.Count(string(b), "BEGIN CERTIFICATE"); c != 1 {
			t.Errorf("%s holds %d certificates, want the leaf alone", n, c)
		}
		leaf, _ := chainOf(t, filepath.Join(dir, n))
		if err := verifies(leaf, nil, poolOf(t, oldCAFile)); err != nil {
			t.Errorf("%s does not verify against the old CA alone: %v", n, err)
		}
		if _, err := tls.LoadX509KeyPair(filepath.Join(dir, n), filepath.Join(dir, n[:len(n)-len(".crt")]+".key")); err != nil {
			t.Errorf("%s: %v", n, err)
		}
		if prev, _ := os.ReadFile(filepath.Join(dir, n+pki.PrevSuffix)); !bytes.Contains(prev, cross) {
			t.Errorf("%s.prev is not the next CA's leaf", n)
		}
	}

	for range 2 {
		if err := RollbackTrustOld(dir); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, pki.CACert)); !bytes.Equal(b, oldCA) {
		t.Fatalf("ca.crt is not the old CA alone:\n%s", b)
	}
	// The next CA's leaf alone (no cross-signed CA after it) is refused.
	nw := filepath.Join(t.TempDir(), "writer.crt")
	if err := os.WriteFile(nw, newWriter, 0o644); err != nil {
		t.Fatal(err)
	}
	if leaf, _ := chainOf(t, nw); verifies(leaf, nil, poolOf(t, filepath.Join(dir, pki.CACert))) == nil {
		t.Error("a leaf of the rolled-back CA verifies against ca.crt")
	}

	for range 2 {
		if err := RollbackRetire(dir); err != nil {
			t.Fatal(err)
		}
	}
	if pki.RotationInProgress(dir) {
		t.Fatal("ca-next.crt still there after the retire")
	}
	for name, want := range map[string][]byte{pki.CANextCert: next, pki.CANextKey: nextKey, pki.CACross: cross} {
		aside, _ := filepath.Glob(filepath.Join(dir, name+pki.AbortedSuffix+"*"))
		if len(aside) != 1 {
			t.Errorf("%s moved aside: %v, want one file", name, aside)
			continue
		}
		if b, _ := os.ReadFile(aside[0]); !bytes.Equal(b, want) {
			t.Errorf("%s is not the next CA's %s", aside[0], name)
		}
		if name == pki.CANextKey {
			if st, err := os.Stat(aside[0]); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("the next CA key moved aside: %v %v, want mode 0600", st, err)
			}
		}
	}
	if rs, err := RenewDir(dir, pki.Validity{}, nil, true, time.Now()); err != nil || len(rs) != 4 {
		t.Errorf("renew after the rollback: %+v, %v", rs, err)
	}
	if _, err := pki.IssueClient(dir, "c1", "late", 0, "", pki.Validity{}); err != nil {
		t.Errorf("issue-client after the rollback: %v", err)
	}
	// A later rotation runs: a new next CA, not the retired one.
	if err := RotationPrepare(dir, "c1", pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, pki.CANextCert)); bytes.Equal(b, next) {
		t.Error("a later rotation reused the retired next CA")
	}
}

// TestRollbackAfterInterruptedDrop: once a drop installed the next CA's
// key as ca.key, or wrote ca.crt as the next CA, the rollback's steps
// refuse (ErrOldCADropped) and change nothing.
func TestRollbackAfterInterruptedDrop(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state func(t *testing.T, dir string)
	}{
		{"next key installed", func(t *testing.T, dir string) {
			kb, _ := os.ReadFile(filepath.Join(dir, pki.CANextKey))
			if err := os.WriteFile(filepath.Join(dir, pki.CAKey), kb, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"next CA installed", func(t *testing.T, dir string) {
			kb, _ := os.ReadFile(filepath.Join(dir, pki.CANextKey))
			cb, _ := os.ReadFile(filepath.Join(dir, pki.CANextCert))
			if err := os.WriteFile(filepath.Join(dir, pki.CAKey), kb, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, pki.CACert), cb, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := pki.Ensure(dir, "c1", nil); err != nil {
				t.Fatal(err)
			}
			if err := RotationPrepare(dir, "c1", pki.Validity{}); err != nil {
				t.Fatal(err)
			}
			if err := RotationTrustBoth(dir); err != nil {
				t.Fatal(err)
			}
			if _, err := RotationReissue(dir, pki.Validity{}, nil, time.Now()); err != nil {
				t.Fatal(err)
			}
			tc.state(t, dir)
			snap := func() map[string]string {
				out := map[string]string{}
				_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
					if err == nil && !d.IsDir() {
						b, _ := os.ReadFile(p)
						out[p] = string(b)
					}
					return nil
				})
				return out
			}
			before := snap()
			if _, err := RollbackLeaves(dir, pki.Validity{}, nil, time.Now()); !errors.Is(err, ErrOldCADropped) {
				t.Errorf("RollbackLeaves: %v, want ErrOldCADropped", err)
			}
			if err := RollbackTrustOld(dir); !errors.Is(err, ErrOldCADropped) {
				t.Errorf("RollbackTrustOld: %v, want ErrOldCADropped", err)
			}
			if err := RollbackRetire(dir); !errors.Is(err, ErrOldCADropped) {
				t.Errorf("RollbackRetire: %v, want ErrOldCADropped", err)
			}
			after := snap()
			if len(after) != len(before) {
				t.Fatal("a refused rollback step added or removed files")
			}
			for k, v := range before {
				if after[k] != v {
					t.Errorf("a refused rollback step changed %s", k)
				}
			}
		})
	}
}
