package operator

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/bootstrap"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/join"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/spec"
)

func TestInitOptions(t *testing.T) {
	ec := testCluster()
	o := InitOptions(ec, "", "/opt/steward/binaries", false)
	if o.Name != "db" || o.Version != "3.6.16" || o.BinaryStore != "/opt/steward/binaries" || o.S3 != nil {
		t.Errorf("options %+v", o)
	}
	if len(o.Hosts) != 3 || o.Hosts[2] != (spec.Host{Name: "db-2", Address: "db-2.db-peer.prod.svc.cluster.local"}) {
		t.Errorf("hosts %+v", o.Hosts)
	}
	if o.ClientPort != 2379 || o.PeerPort != 2380 || o.AgentPort != 2378 {
		t.Errorf("ports %d %d %d", o.ClientPort, o.PeerPort, o.AgentPort)
	}
	ec.Spec.Backup = &v1alpha1.Backup{S3: &v1alpha1.S3{Endpoint: "http://s3.example:7070/", Bucket: "b", CredentialsSecret: "creds", Region: "r"}}
	o = InitOptions(ec, "k8s.example", "", true)
	if o.Hosts[0].Address != "db-0.db-peer.prod.svc.k8s.example" {
		t.Errorf("domain not used: %s", o.Hosts[0].Address)
	}
	want := spec.S3{Endpoint: "http://s3.example:7070", Bucket: "b", Prefix: "prod/db", Region: "r",
		CredentialsFile: "secrets/s3-credentials", CAFile: "secrets/s3-ca.pem"}
	if o.S3 == nil || *o.S3 != want {
		t.Errorf("s3 %+v, want %+v", o.S3, want)
	}
}

func TestS3Credentials(t *testing.T) {
	b, err := S3Credentials("creds", map[string][]byte{"AWS_ACCESS_KEY_ID": []byte("AK"), "AWS_SECRET_ACCESS_KEY": []byte("SK")})
	if err != nil || string(b) != "AWS_ACCESS_KEY_ID=AK\nAWS_SECRET_ACCESS_KEY=SK\n" {
		t.Errorf("credentials %q, %v", b, err)
	}
	_, err = S3Credentials("creds", map[string][]byte{"AWS_ACCESS_KEY_ID": []byte("AK"), "AWS_SECRET_ACCESS_KEY": []byte("secret\nx")})
	if !errors.Is(err, ErrBadSecret) || !strings.Contains(err.Error(), "Secret creds needs the keys AWS_SECRET_ACCESS_KEY") || strings.Contains(err.Error(), "secret\nx") {
		t.Errorf("bad secret: %v", err)
	}
}

// A directory of a deleted resource of the same name is moved aside,
// never deleted; the resource's own is kept.
func TestClaimDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "prod", "db")
	if moved, err := claimDir(dir, "uid-1"); err != nil || moved != "" {
		t.Fatalf("first claim: %q %v", moved, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cluster.yaml"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if moved, err := claimDir(dir, "uid-1"); err != nil || moved != "" {
		t.Fatalf("same uid: %q %v", moved, err)
	}
	moved, err := claimDir(dir, "uid-2")
	if err != nil || moved != dir+".uid-1" {
		t.Fatalf("other uid: %q %v", moved, err)
	}
	if _, err := os.Stat(filepath.Join(moved, "cluster.yaml")); err != nil {
		t.Errorf("the old directory's spec is gone: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cluster.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the new directory holds the old spec: %v", err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("new dir: %v %v", st, err)
	}
}

// initDir writes the directory through steward init's library path and
// names the members as their pods; run again, it changes nothing.
func TestInitDir(t *testing.T) {
	ec := testCluster()
	ec.Spec.Version = ""
	ec.Spec.Etcd.QuotaBackendBytes = 1 << 30
	ec.Spec.Recovery.Mode = "manual"
	dir := filepath.Join(t.TempDir(), "prod", "db")
	c, created, err := initDir(t.Context(), dir, ec, InitOptions(ec, "", "", false), progress.Func(nil))
	if err != nil || !created {
		t.Fatalf("initDir: %v created=%v", err, created)
	}
	var names, agents []string
	for _, m := range c.Spec.Members {
		names = append(names, m.Name)
		agents = append(agents, m.Agent)
		if m.DataDir != filepath.Join("members", m.Name, "data") || !strings.Contains(m.ClientURL, m.Name+".db-peer.prod.svc.cluster.local:2379") {
			t.Errorf("member %+v", m)
		}
	}
	if strings.Join(names, ",") != "db-0,db-1,db-2" || strings.Join(agents, ",") != "db-0,db-1,db-2" {
		t.Errorf("members %v on agents %v", names, agents)
	}
	if c.Spec.Etcd.QuotaBackendBytes != 1<<30 || c.Spec.Recovery.Mode != "manual" {
		t.Errorf("settings not shaped: %+v %+v", c.Spec.Etcd, c.Spec.Recovery)
	}
	for i := range 3 {
		f, err := join.Read(bootstrap.JoinPath(dir, PodName(ec, i)))
		if err != nil || f.Host != HostName(ec, i, "") || f.Port != AgentPort {
			t.Fatalf("join file %d: %+v %v", i, f, err)
		}
		// Applications connect through the client Service: its names are
		// in every member's server certificate.
		blk, _ := pem.Decode([]byte(f.ServerCert))
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"db-client", "db-client.prod.svc", "db-client.prod.svc.cluster.local", HostName(ec, i, "")} {
			if err := cert.VerifyHostname(n); err != nil {
				t.Errorf("pod %d: %v", i, err)
			}
		}
	}
	again, created, err := initDir(t.Context(), dir, ec, InitOptions(ec, "", "", false), progress.Func(nil))
	if err != nil || created || again.Spec.Token != c.Spec.Token {
		t.Errorf("second initDir: %v created=%v token %s vs %s", err, created, again.Spec.Token, c.Spec.Token)
	}
	if _, err := cluster.Open(dir); err != nil {
		t.Errorf("the directory does not open: %v", err)
	}
}

// A state volume others can write (an emptyDir is 0777) is made private:
// the Steward directories under it would be refused otherwise.
func TestPrepareStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := prepareStateDir(dir); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("state dir %v %v", st.Mode(), err)
	}
}

// Without --member-image and outside a pod, the operator refuses to start,
// naming what it lacks.
func TestOwnImageOutsideAPod(t *testing.T) {
	t.Setenv("POD_NAME", "")
	t.Setenv("POD_NAMESPACE", "")
	_, err := ownImage(t.Context(), nil, nil)
	if !errors.Is(err, ErrNoMemberImage) || !strings.Contains(err.Error(), "POD_NAMESPACE and POD_NAME are not set") {
		t.Errorf("ownImage: %v", err)
	}
}
