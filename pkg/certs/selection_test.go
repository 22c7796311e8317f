package certs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/pki"
)

// TestSignerOnlyWhenDue: the one reissue loop asks for the signer only
// once a leaf is to be reissued, so a directory without the CA key (a
// joined host's) renews nothing and fails nothing while nothing is due,
// and names the missing key (pki.ErrNoCAKey) once something is; a leaf
// the signer signed already is left alone on a host too.
func TestSignerOnlyWhenDue(t *testing.T) {
	dir := t.TempDir()
	if err := pki.Ensure(dir, "c1", []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	server, err := pki.ParseCertFile(filepath.Join(dir, pki.ServerCert))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, pki.CAKey), filepath.Join(t.TempDir(), pki.CAKey)); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if rs, err := RenewDir(dir, pki.Validity{}, nil, false, now); err != nil || len(rs) != 0 {
		t.Fatalf("nothing due without the CA key: %v, %v; want nothing and no error", rs, err)
	}
	if _, err := RenewDir(dir, pki.Validity{}, nil, true, now); !errors.Is(err, pki.ErrNoCAKey) {
		t.Fatalf("forced without the CA key: %v, want ErrNoCAKey", err)
	}
	sel, err := renewal(dir, "renew certificates", pki.Validity{}, false, now)
	if err != nil {
		t.Fatal(err)
	}
	if pem, _, done, err := sel.leaf("server", server, now); !done || err != nil || pem != nil {
		t.Fatalf("a host leaf not due: done %v, %v, %d bytes; want left alone", done, err, len(pem))
	}
}
