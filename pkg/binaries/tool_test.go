package binaries

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestToolMissing: a tool missing from the store is named as the tool, not
// reported as an unknown etcd version.
func TestToolMissing(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, DirPrefix+"3.5.35"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, DirPrefix+"3.5.35", "etcd"), []byte("x"), 0o700); err != nil {
		t.Fatal(err)
	}
	s := Open(dir)
	tests := []struct {
		version, want string
	}{
		{"3.5.35", "etcd 3.5.35 is in the binary store " + dir + ", but without etcdutl: tool not in the binary store"},
		{"3.5.36", "etcdutl 3.5.36 is not in the binary store " + dir + " (etcd 3.5.36 is not there at all)"},
	}
	for _, tt := range tests {
		_, err := s.Tool(tt.version, "etcdutl")
		if !errors.Is(err, ErrToolNotFound) || !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Tool(%s, etcdutl) = %v; want ErrToolNotFound and %q", tt.version, err, tt.want)
		}
		if strings.Contains(err.Error(), "etcd version not found") {
			t.Errorf("Tool(%s, etcdutl) says the version is not found: %v", tt.version, err)
		}
	}
}
