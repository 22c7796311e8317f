package pki

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInstallTrustBundleCaller: a trust bundle that would not verify the
// certificate of the request pushing it (the coordinator's admin) is
// refused and nothing is written; one that does is installed; a CA not
// valid now is refused.
func TestInstallTrustBundleCaller(t *testing.T) {
	root := t.TempDir()
	coord, host, other := filepath.Join(root, "coord"), filepath.Join(root, "host"), filepath.Join(root, "other")
	for _, d := range []string{coord, other} {
		if err := Ensure(d, "c", []string{"127.0.0.1"}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := IssueHost(coord, "c", "cp-2", "10.0.0.12", Validity{})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteHost(host, b); err != nil {
		t.Fatal(err)
	}
	admin := mustCert(t, filepath.Join(coord, ClientCert))
	stranger := mustCert(t, filepath.Join(other, ClientCert))
	if err := RotationPrepare(coord, "c", Validity{}); err != nil {
		t.Fatal(err)
	}
	if err := RotationTrustBoth(coord); err != nil {
		t.Fatal(err)
	}
	both, err := os.ReadFile(filepath.Join(coord, CACert))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(host, CACert))
	now := time.Now()
	for _, tc := range []struct {
		name   string
		caller bool
		now    time.Time
		want   string
	}{
		{name: "a caller the bundle does not verify", now: now, want: "the agent would refuse its coordinator"},
		{name: "a CA expired", caller: true, now: now.Add(30 * 365 * 24 * time.Hour), want: "is not valid now"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			caller := stranger
			if tc.caller {
				caller = admin
			}
			_, err := InstallTrustBundle(host, both, caller, tc.now)
			if !errors.Is(err, ErrBadTrustBundle) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("InstallTrustBundle: %v, want %q", err, tc.want)
			}
			if after, _ := os.ReadFile(filepath.Join(host, CACert)); string(after) != string(before) {
				t.Error("ca.crt changed after a refusal")
			}
		})
	}
	r, err := InstallTrustBundle(host, both, admin, now)
	if err != nil || !r.Changed || len(r.CAs) != 2 {
		t.Fatalf("InstallTrustBundle: %+v %v", r, err)
	}
}

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
