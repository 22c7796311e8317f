package hosts_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
)

// TestHostsS3PrivateCA: backups to an S3 server (versitygw) whose
// certificate is signed by a CA of its own, which no system root
// verifies, from every host of a three-host cluster. `init` with another
// CA file is refused, naming the file, the endpoint and the unknown
// authority, and writes nothing; with the server's CA, every host gets it
// with the spec (DIR/secrets/s3-ca.pem, 0600, named by the host's copy of
// the spec); leadership moves to each host in turn and that host's backup
// loop records a write into the bucket; then the cluster is stopped and
// restored from the bucket, with every write present.
func TestHostsS3PrivateCA(t *testing.T) {
	t.Parallel()
	hs := harness.NewHosts(t, 3)
	s3 := harness.StartS3TLSAt(t, hs.Net.Addr)
	s3Flags := []string{"--backup-s3-endpoint", s3.Endpoint, "--backup-s3-bucket", s3.Bucket,
		"--backup-s3-credentials-file", s3.CredentialsFile, "--backup-s3-prefix", "privateca"}

	otherDir := t.TempDir()
	if err := pki.Ensure(otherDir, "other", nil); err != nil {
		t.Fatal(err)
	}
	otherCA := pki.FilesIn(otherDir).CA
	args := append([]string{"init", "--version", "3.6.16", "--binary-store", hs.Store}, hs.HostFlags()...)
	out := hs.MustFail(append(append(args, s3Flags...), "--backup-s3-ca-file", otherCA)...)
	for _, want := range []string{otherCA, s3.Endpoint, "unknown authority"} {
		if !strings.Contains(out, want) {
			t.Errorf("init with another CA: %q does not say %q", out, want)
		}
	}
	for _, p := range []string{spec.FileName, "pki", "join"} {
		if _, err := os.Stat(filepath.Join(hs.Dir, p)); err == nil {
			t.Fatalf("a refused init wrote %s", p)
		}
	}

	hs.Init("3.6.16", append(s3Flags, "--backup-s3-ca-file", s3.CAFile)...)
	hs.StartAgents()
	e := hs.Env.For(t)
	if out := e.MustRun("up"); !strings.Contains(out, "is healthy: 3 members") {
		t.Fatalf("up: %s", out)
	}
	e.WaitStatus(time.Minute, "three healthy members on three hosts", harness.Healthy)

	ca, err := os.ReadFile(s3.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs.Hosts {
		p := filepath.Join(h.Dir, "secrets", "s3-ca.pem")
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("host %s has no S3 CA: %v", h.Name, err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", p, fi.Mode().Perm())
		}
		if b, _ := os.ReadFile(p); !bytes.Equal(b, ca) {
			t.Errorf("%s is not the coordinator's CA file", p)
		}
		hsp, err := spec.Load(filepath.Join(h.Dir, spec.FileName))
		if err != nil {
			t.Fatal(err)
		}
		if got := hsp.Backup.S3.CAFile; got != "secrets/s3-ca.pem" {
			t.Errorf("host %s's spec names caFile %q", h.Name, got)
		}
	}

	cli := hs.Client()
	defer cli.Close()
	want := map[string]string{}
	for _, m := range e.Spec().Members {
		if st := e.Status(); st.Cluster.Leader != m.Name {
			e.MustRun("leader", "move", "--to", m.Name)
		}
		e.WaitStatus(time.Minute, "backups recording on host "+m.Agent, func(st *status.Status) bool {
			c := harness.Cond(st, status.CondBackupReady)
			return st.Cluster.Leader == m.Name && c.Status == "True" && strings.Contains(c.Message, "agent "+m.Agent+" records every change")
		})
		k, v := "privateca/"+m.Agent, fmt.Sprintf("recorded by %s's loop", m.Agent)
		resp, err := cli.Put(t.Context(), k, v)
		if err != nil {
			t.Fatal(err)
		}
		want[k] = v
		harness.WaitBackedUp(t, e, resp.Header.Revision)
		found := false
		for _, b := range harness.ListBackups(t, e) {
			if b.Member == m.Name && b.StartRevision <= resp.Header.Revision && resp.Header.Revision <= b.EndRevision {
				found = true
			}
		}
		if !found {
			t.Errorf("no backup from member %s (host %s) holds revision %d", m.Name, m.Agent, resp.Header.Revision)
		}
	}
	cli.Close()

	// Stopped on their hosts (`down` stops this machine's agent only).
	for _, m := range e.Spec().Members {
		e.MustRun("member", "stop", "--force", m.Name)
	}
	_, se, err := e.Run("restore", "--force")
	if err != nil || !strings.Contains(se, "restored 3 members from") {
		t.Fatalf("restore from the bucket: %v: %s", err, se)
	}
	t.Logf("restore: %s", se)
	e.MustRun("up")
	e.WaitStatus(time.Minute, "healthy after the restore from S3", harness.Healthy)
	after := hs.Client()
	defer after.Close()
	g, err := after.Get(t.Context(), "privateca/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range g.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("restored from S3: %v, want %v", got, want)
	}
}
