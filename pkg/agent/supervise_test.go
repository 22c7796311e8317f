package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/agentapi"
)

// TestConfigChangesWhileSupervised changes member configs through the API
// (PutMember) while the members' supervision loops run, a stop times out
// and other members are added. The loops never start a process: the
// version is in no store and is not the embedded one, so each launch fails
// and the loop backs off. Under -race (make test) it fails when the loop,
// a stop or PutMember reads a member's config without that member's lock.
func TestConfigChangesWhileSupervised(t *testing.T) {
	dir := t.TempDir()
	a := New(Options{Dir: dir, Log: slog.New(slog.DiscardHandler)})
	cfg := func(name, version string) agentapi.MemberConfig {
		return agentapi.MemberConfig{
			Name: name, Version: version, BinaryStore: filepath.Join(dir, "empty-store"),
			DataDir:   filepath.Join(dir, "members", name, "data"),
			ClientURL: "http://127.0.0.1:1", PeerURL: "http://127.0.0.1:2",
			InitialCluster: name + "=http://127.0.0.1:2", InitialClusterState: "new",
		}
	}
	for _, d := range []string{a.membersDir(), filepath.Join(dir, "logs"), a.runDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.PutMember(cfg("etcd-1", "3.5.0")); err != nil {
		t.Fatal(err)
	}
	m, _ := a.member("etcd-1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Each round starts a new supervision loop.
	for round := range 10 {
		if err := m.start(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() { // the operator edits the supervised member
			for i := range 20 {
				if _, err := a.PutMember(cfg("etcd-1", fmt.Sprintf("3.5.%d", i))); err != nil {
					t.Error(err)
				}
			}
		})
		wg.Go(func() { // new members: PutMember compares data dirs with etcd-1's
			for i := range 5 {
				if _, err := a.PutMember(cfg(fmt.Sprintf("etcd-%d-%d", round, i), "3.5.0")); err != nil {
					t.Error(err)
				}
			}
		})
		wg.Go(func() { // a stop whose caller gives up at once names the member
			gone, cancel := context.WithCancel(context.Background())
			cancel()
			_ = m.halt(gone, false, 0)
		})
		wg.Wait()
		if err := m.stop(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.PutMember(cfg("etcd-99", "3.5.0")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PutMember(agentapi.MemberConfig{}); err == nil {
		t.Fatal("an empty config was accepted")
	}
	dup := cfg("etcd-100", "3.5.0")
	dup.DataDir = cfg("etcd-1", "").DataDir
	if _, err := a.PutMember(dup); err == nil {
		t.Fatal("a second member on etcd-1's data dir was accepted")
	}

	if err := m.start(); err != nil {
		t.Fatal(err)
	}
	a.stopAll() // stops etcd-1 and keeps it desired running on disk
	st := m.status()
	if st.State != agentapi.StateStopped || st.Version != "3.5.19" {
		t.Fatalf("status after stop: state %s, version %s; want Stopped and 3.5.19", st.State, st.Version)
	}
}
