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

// TestSetClusterS3CA: the S3 server's CA comes with the spec, is checked
// on arrival (PEM certificates only) and written 0600 where the host's
// spec names it; a bundle that does not parse, or a spec naming a CA file
// without its content (a coordinator that does not send it), is refused
// with nothing written, never leaving the host on its system roots.
func TestSetClusterS3CA(t *testing.T) {
	s, err := spec.NewMultiHost(spec.HostsOptions{Name: "c1", Version: "3.6.16", Hosts: []spec.Host{{Name: "h1", Address: "10.0.0.1"}, {Name: "h2", Address: "10.0.0.2"}}})
	if err != nil {
		t.Fatal(err)
	}
	s.Token = "tok"
	s.Backup.S3 = &spec.S3{Endpoint: "https://10.0.0.9:7070", Bucket: "b", CAFile: "/etc/steward/s3-ca.pem"}
	src := filepath.Join(t.TempDir(), spec.FileName)
	if err := s.Save(src); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	pkiDir := t.TempDir()
	if err := pki.Ensure(pkiDir, "s3", nil); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(pki.FilesIn(pkiDir).CA)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a := &Agent{opts: Options{Name: "h1", Dir: dir, ClusterToken: "tok"}}
	for name, f := range map[string]agentapi.ClusterFiles{
		"no CA sent":      {Spec: string(b), BackupAuthKey: "auth-1"},
		"CA not PEM":      {Spec: string(b), BackupAuthKey: "auth-1", S3CA: "not a certificate"},
		"a key, not a CA": {Spec: string(b), BackupAuthKey: "auth-1", S3CA: "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"},
	} {
		err := a.SetCluster(f)
		var br badRequest
		if !errors.As(err, &br) {
			t.Fatalf("%s: %v, want a refusal", name, err)
		}
		t.Logf("%s: %v", name, err)
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Fatalf("%s: a refused hand-over wrote %v", name, ents)
		}
	}
	if err := a.SetCluster(agentapi.ClusterFiles{Spec: string(b), BackupAuthKey: "auth-1", S3CA: string(ca)}); err != nil {
		t.Fatal(err)
	}
	got, err := spec.Load(filepath.Join(dir, spec.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if got.Backup.S3.CAFile != s3CAFile {
		t.Errorf("the host's spec names caFile %q, want %q", got.Backup.S3.CAFile, s3CAFile)
	}
	p := filepath.Join(dir, s3CAFile)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", p, fi.Mode().Perm())
	}
	if have, _ := os.ReadFile(p); string(have) != string(ca) {
		t.Error("the host's CA file is not the coordinator's")
	}
}
