package cluster

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/spec"
)

// silentS3 is an S3 endpoint that accepts connections and never answers:
// a backup store that hangs.
func silentS3(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				close(done)
				return
			}
			conns = append(conns, conn)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// TestSaveSpecContext: SaveSpec and the plans' mirror take the caller's
// context. On a multi-host cluster whose backup store hangs, cancelling it
// makes them return at once with context.Canceled, not after their own
// bounds (15 s, 30 s); SaveSpec then changes nothing, and the plan is saved
// here all the same. A context cancelled before SaveSpec is called changes
// nothing on a single-host cluster either.
func TestSaveSpecContext(t *testing.T) {
	dir := t.TempDir()
	creds := filepath.Join(dir, "s3-credentials")
	if err := os.WriteFile(creds, []byte("AWS_ACCESS_KEY_ID=a\nAWS_SECRET_ACCESS_KEY=b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := spec.NewMultiHost(spec.HostsOptions{Name: "c1", Version: binaries.EmbeddedVersion(),
		Hosts: []spec.Host{{Name: "h1", Address: "10.0.0.11"}, {Name: "h2", Address: "10.0.0.12"}, {Name: "h3", Address: "10.0.0.13"}}})
	if err != nil {
		t.Fatal(err)
	}
	s.Backup.S3 = &spec.S3{Endpoint: silentS3(t), Bucket: "backups", CredentialsFile: creds}
	c := &Cluster{Dir: dir, Spec: s}
	if err := c.EnsureCerts(); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(c.SpecPath()); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(c.SpecPath())
	if err != nil {
		t.Fatal(err)
	}

	cancelSoon := func() context.Context {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(200*time.Millisecond, cancel)
		t.Cleanup(cancel)
		return ctx
	}
	next := s.Clone()
	next.Name = "c2"
	start := time.Now()
	err = c.SaveSpec(cancelSoon(), next)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("SaveSpec with a cancelled context: %v; want context.Canceled", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("SaveSpec took %s after its context was cancelled", took)
	}
	if after, _ := os.ReadFile(c.SpecPath()); string(after) != string(before) || c.Spec.Name != "c1" {
		t.Errorf("SaveSpec with a cancelled context changed the spec")
	}

	p := &plan.Plan{ID: "upgrade-1", Kind: plan.KindUpgrade, State: plan.Pending, CreatedAt: time.Now()}
	start = time.Now()
	err = c.Plans().Save(cancelSoon(), p)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("the plans' mirror with a cancelled context: %v; want context.Canceled", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the plans' mirror took %s after its context was cancelled", took)
	}
	if got, err := c.Plans().Get(p.ID); err != nil || got.ID != p.ID {
		t.Errorf("the plan is not saved here: %v, %v", got, err)
	}

	// Single host: nothing to ask, but a caller that gave up changes nothing.
	ldir := t.TempDir()
	port := 40000
	ls, err := spec.NewDefault(spec.DefaultOptions{Name: "c1", Version: binaries.EmbeddedVersion(), Members: 1, StewardDir: ldir,
		FreePort: func() (int, error) { port++; return port, nil }})
	if err != nil {
		t.Fatal(err)
	}
	local := &Cluster{Dir: ldir, Spec: ls}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := local.SaveSpec(ctx, local.Spec.Clone()); !errors.Is(err, context.Canceled) {
		t.Errorf("single-host SaveSpec with a cancelled context: %v", err)
	}
	if _, err := os.Stat(local.SpecPath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("single-host SaveSpec with a cancelled context wrote the spec: %v", err)
	}
}

// TestSaveSpecRefusalWording: a proposed change that would make the spec
// invalid is refused as a change, with the file named as unchanged, not
// as "invalid cluster spec FILE" (which read as if the file on disk were
// broken); the file is left as it was.
func TestSaveSpecRefusalWording(t *testing.T) {
	dir := t.TempDir()
	port := 21000
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 2, Version: binaries.EmbeddedVersion(), StewardDir: dir, Host: "127.0.0.1",
		FreePort: func() (int, error) { port++; return port, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(filepath.Join(dir, spec.FileName)); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, spec.FileName))
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	next := c.Spec.Clone()
	next.Members = append(next.Members, spec.Member{Name: "etcd-3", Agent: spec.LocalAgent,
		ClientURL: next.Members[0].ClientURL, PeerURL: "https://127.0.0.1:21999", DataDir: "members/etcd-3/data"})
	err = c.SaveSpec(t.Context(), next)
	if err == nil {
		t.Fatal("a spec with a client URL used twice was saved")
	}
	msg := err.Error()
	if strings.Contains(msg, "invalid cluster spec") || !strings.Contains(msg, "change refused") || !strings.Contains(msg, "is unchanged") || !strings.Contains(msg, "address already used by") {
		t.Errorf("refusal of a proposed change: %s", msg)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, spec.FileName)); string(after) != string(before) {
		t.Error("the spec file changed although the change was refused")
	}
}
