package pki

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestParseLeafChainPEM: the leaf and the CA certificates after it; a
// second leaf is refused.
func TestParseLeafChainPEM(t *testing.T) {
	dir := t.TempDir()
	if err := Ensure(dir, "c", []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	leaf, _ := os.ReadFile(filepath.Join(dir, ServerCert))
	ca, _ := os.ReadFile(filepath.Join(dir, CACert))
	for _, tc := range []struct {
		name, in string
		chain    int
		err      bool
	}{
		{"a leaf", string(leaf), 0, false},
		{"a leaf and a CA", string(leaf) + string(ca), 1, false},
		{"two leaves", string(leaf) + string(leaf), 0, true},
		{"nothing", "", 0, true},
		{"garbage after", string(leaf) + "x", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, chain, err := ParseLeafChainPEM([]byte(tc.in))
			if tc.err {
				if !errors.Is(err, ErrUnparsable) {
					t.Fatalf("err %v, want ErrUnparsable", err)
				}
				return
			}
			if err != nil || l.IsCA || len(chain) != tc.chain {
				t.Fatalf("leaf %v, %d CAs, %v", l != nil, len(chain), err)
			}
		})
	}
}
