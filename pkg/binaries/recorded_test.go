package binaries

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckRecorded: a stored binary is run only while it is the file its
// manifest recorded; a replaced one (same size, even with its mtime set
// back) is refused with both sums named.
func TestCheckRecorded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), DirPrefix+"3.6.16")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "etcdutl")
	orig := []byte("#!/bin/sh\necho real\n")
	if err := os.WriteFile(bin, orig, 0o700); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(orig)
	b, _ := json.Marshal(manifest{Version: "3.6.16", Files: map[string]string{"etcdutl": hex.EncodeToString(sum[:])}})
	if err := os.WriteFile(filepath.Join(dir, ManifestName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckRecorded(bin); err != nil {
		t.Fatalf("the imported file: %v", err)
	}
	s := Open(filepath.Dir(dir))
	if p, err := s.Tool("3.6.16", "etcdutl"); err != nil || p != bin {
		t.Fatalf("Tool = %q, %v", p, err)
	}
	fi, _ := os.Stat(bin)
	evil := []byte("#!/bin/sh\necho evil\n")
	if err := os.WriteFile(bin, evil, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(bin, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	err := CheckRecorded(bin)
	if p, _ := ProblemOf(err); !errors.Is(err, ErrBinaryChanged) || !strings.Contains(err.Error(), hex.EncodeToString(sum[:])) ||
		p.Kind != KindChanged || p.Version != "3.6.16" {
		t.Fatalf("a replaced file = %v; want ErrBinaryChanged naming the recorded sum", err)
	}
	if _, err := s.Tool("3.6.16", "etcdutl"); !errors.Is(err, ErrBinaryChanged) {
		t.Fatalf("Tool of a replaced file = %v; want ErrBinaryChanged", err)
	}
	// A tool the manifest does not list (dropped in after the import) is
	// not run.
	other := filepath.Join(dir, "etcdctl")
	if err := os.WriteFile(other, orig, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := CheckRecorded(other); !errors.Is(err, ErrNotRecorded) || !strings.Contains(err.Error(), "lists no SHA-256 for etcdctl") {
		t.Fatalf("a tool the manifest does not list = %v; want ErrNotRecorded naming it", err)
	}
	// A version laid out by hand (no manifest) is not run either: the
	// error says how to import it again.
	if err := os.WriteFile(bin, orig, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, ManifestName)); err != nil {
		t.Fatal(err)
	}
	err = CheckRecorded(bin)
	if p, ok := ProblemOf(err); !errors.Is(err, ErrNotRecorded) || !strings.Contains(err.Error(), dir+" has no manifest.json") ||
		!strings.HasSuffix(err.Error(), "; import etcd 3.6.16 again from its release tarball or build directory") ||
		!ok || p != (Problem{Kind: KindNotRecorded, Version: "3.6.16", Store: filepath.Dir(dir), Message: err.Error()}) {
		t.Fatalf("no manifest = %v (%+v); want ErrNotRecorded with how to import again, a problem of its kind", err, p)
	}
	if _, err := s.Tool("3.6.16", "etcdutl"); !errors.Is(err, ErrNotRecorded) {
		t.Fatalf("Tool without a manifest = %v; want ErrNotRecorded", err)
	}
}
