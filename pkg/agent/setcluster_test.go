package agent

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestSetClusterKeepsKeys: a spec hand-over never loses a key earlier
// backups need. Another cluster backup key than the host's (a coordinator
// that made its own after a takeover without it) is refused with nothing
// written; an encryption key that changes or goes is moved aside, not
// overwritten or deleted.
func TestSetClusterKeepsKeys(t *testing.T) {
	s, err := spec.NewMultiHost(spec.HostsOptions{Name: "c1", Version: "3.6.16", Hosts: []spec.Host{{Name: "h1", Address: "10.0.0.1"}, {Name: "h2", Address: "10.0.0.2"}}})
	if err != nil {
		t.Fatal(err)
	}
	s.Token = "tok"
	src := filepath.Join(t.TempDir(), spec.FileName)
	if err := s.Save(src); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a := &Agent{opts: Options{Name: "h1", Dir: dir, ClusterToken: "tok"}}
	files := agentapi.ClusterFiles{Spec: string(b), BackupKey: "enc-1", BackupAuthKey: "auth-1"}
	if err := a.SetCluster(files); err != nil {
		t.Fatal(err)
	}
	specBefore, _ := os.ReadFile(filepath.Join(dir, spec.FileName))

	other := files
	other.BackupAuthKey, other.BackupKey = "auth-2", "enc-2"
	if err := a.SetCluster(other); !errors.Is(err, ErrOtherBackupAuthKey) {
		t.Fatalf("hand-over with another backup key: %v, want ErrOtherBackupAuthKey", err)
	}
	if k, _ := os.ReadFile(filepath.Join(dir, "pki", pki.BackupAuthKey)); string(k) != "auth-1" {
		t.Errorf("the host's backup key is %q after a refused hand-over, want auth-1", k)
	}
	if k, _ := os.ReadFile(filepath.Join(dir, backupKeyFile)); string(k) != "enc-1" {
		t.Errorf("the encryption key is %q after a refused hand-over, want enc-1", k)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, spec.FileName)); string(after) != string(specBefore) {
		t.Error("a refused hand-over rewrote the spec")
	}

	// The encryption key changes, then is no longer used: both earlier
	// keys are kept aside.
	files.BackupKey = "enc-2"
	if err := a.SetCluster(files); err != nil {
		t.Fatal(err)
	}
	files.BackupKey = ""
	if err := a.SetCluster(files); err != nil {
		t.Fatal(err)
	}
	aside, _ := filepath.Glob(filepath.Join(dir, backupKeyFile) + ".replaced-*")
	got := map[string]bool{}
	for _, p := range aside {
		b, _ := os.ReadFile(p)
		got[string(b)] = true
	}
	if len(aside) != 2 || !got["enc-1"] || !got["enc-2"] {
		t.Errorf("encryption keys kept aside: %v (%v), want enc-1 and enc-2", aside, got)
	}
}
