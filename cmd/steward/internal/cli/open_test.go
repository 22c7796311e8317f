package cli

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestOpenNoSpec: a Steward directory without a spec is ErrNoSpec, and
// the command side adds the `steward up --dir` advice.
func TestOpenNoSpec(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(dir)
	want := cluster.ErrNoSpec.Error() + ": " + filepath.Join(dir, spec.FileName) + " does not exist; run `steward up --dir " + dir + "` first"
	if err == nil || err.Error() != want {
		t.Fatalf("Open: %v, want %q", err, want)
	}
	if !errors.Is(err, cluster.ErrNoSpec) {
		t.Errorf("Open lost the chain: %v", err)
	}
	if _, err := cluster.Open(dir); !errors.Is(err, cluster.ErrNoSpec) || err.Error() != cluster.ErrNoSpec.Error()+": "+filepath.Join(dir, spec.FileName)+" does not exist" {
		t.Errorf("cluster.Open: %v", err)
	}
}
