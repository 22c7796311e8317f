package hosts_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// TestHostsUpgradeByRestore: three members on three hosts go 3.5 -> 3.6
// with `upgrade --strategy restore` and back with `rollback --strategy
// restore`, under a writer. The coordinator prepares the database once
// (copied from the source member's host) and each host's agent builds its
// member's new data dir; the coordinator is killed in the replace step
// after the second member's new data dir was built, and `plan resume`
// converges; the rollback's coordinator is killed after the first member's
// new data dir was built, and resumed too. Every acknowledged write is
// there at the end, and the old data dirs stay on their hosts.
func TestHostsUpgradeByRestore(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	hs := harness.NewHosts(t, 3)
	hs.Init(vs[0])
	hs.StartAgents()
	hs.MustRun("up")
	hs.WaitStatus(time.Minute, "three healthy members on three hosts", harness.Healthy)
	cli := hs.Client()
	defer cli.Close()
	w := harness.UnderWrites(t, cli, workload.Options{Prefix: "hosts-restore", Attempts: 20, Timeout: 3 * time.Second}, harness.Expect{})
	before := hs.Spec()

	if !t.Run("upgrade by restore to "+vs[1]+", coordinator killed mid-replace", func(t *testing.T) {
		e := hs.Env.For(t)
		point := crashpoint.Indexed(crashpoint.ReplaceBuilt, 1)
		_, se, err := e.RunEnv([]string{crashpoint.EnvVar + "=" + point}, "upgrade", "apply", "--to", vs[1], "--strategy", "restore")
		if err == nil || !strings.Contains(se, "crashpoint: "+point) {
			t.Fatalf("want the coordinator killed at %s: %v: %s", point, err, se)
		}
		if got := e.Spec(); got.Members[0].DataDir != before.Members[0].DataDir {
			t.Fatalf("the spec names new data dirs before every member's was built: %s", got.Members[0].DataDir)
		}
		// The first two members' new data dirs were built on their hosts,
		// with version records saying the version their database ran on.
		for _, m := range before.Members[:2] {
			nd := filepath.Join(hs.Host(m.Agent).Dir, m.DataDir+"-v"+vs[1])
			rec, ok, err := datadir.ReadRecord(nd)
			if _, serr := os.Stat(filepath.Join(nd, "member", "snap", "db")); serr != nil || !ok || err != nil || rec.Version != vs[0] {
				t.Fatalf("member %s: new data dir %s on host %s: %v; version record %+v %v %v", m.Name, nd, m.Agent, serr, rec, ok, err)
			}
		}
		e.MustRun("plan", "resume")
		st := e.WaitStatus(time.Minute, "every member healthy on "+vs[1], harness.Healthy)
		harness.RequireVersion(t, st, vs[1], "after the upgrade by restore")
		p := harness.LatestPlan(t, e)
		if p.State != plan.Done || p.Strategy != "restore" || p.To != vs[1] {
			t.Fatalf("upgrade plan %s: state %s, strategy %s, to %s", p.ID, p.State, p.Strategy, p.To)
		}
		after := e.Spec()
		for i, m := range after.Members {
			old := before.Members[i]
			if !strings.HasSuffix(m.DataDir, "-v"+vs[1]) {
				t.Errorf("member %s: data dir %s, want a new one for %s", m.Name, m.DataDir, vs[1])
			}
			// The old data dir stays whole on its host, for a rollback.
			h := hs.Host(m.Agent)
			if _, err := os.Stat(filepath.Join(h.Dir, old.DataDir, "member", "snap", "db")); err != nil {
				t.Errorf("member %s: the old data dir on host %s: %v", m.Name, m.Agent, err)
			}
			if fi, err := os.Stat(filepath.Join(h.Dir, m.DataDir)); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("member %s: the new data dir on host %s: %v %v", m.Name, m.Agent, fi, err)
			}
		}
		rev := w.MaxRev()
		harness.Eventually(t, time.Minute, 100*time.Millisecond, "writes after the upgrade", w.RevAbove(rev+50))
	}) {
		return
	}
	t.Run("rollback by restore to "+vs[0]+", coordinator killed mid-replace", func(t *testing.T) {
		e := hs.Env.For(t)
		// Killed after the first member's new data dir (the backup with
		// the keyspace grafted in) was built on its host.
		point := crashpoint.Indexed(crashpoint.ReplaceBuilt, 0)
		_, se, err := e.RunEnv([]string{crashpoint.EnvVar + "=" + point}, "rollback", "--strategy", "restore")
		if err == nil || !strings.Contains(se, "crashpoint: "+point) {
			t.Fatalf("want the coordinator killed at %s: %v: %s", point, err, se)
		}
		e.MustRun("plan", "resume")
		st := e.WaitStatus(time.Minute, "every member back on "+vs[0], harness.Healthy)
		harness.RequireVersion(t, st, vs[0], "after the rollback by restore")
		rb := harness.LatestPlan(t, e)
		if rb.Kind != plan.KindRollback || rb.State != plan.Done || rb.Strategy != "restore" || rb.Value("base-backup") == "" {
			t.Fatalf("rollback plan %s: kind %s, state %s, strategy %s, base backup %q", rb.ID, rb.Kind, rb.State, rb.Strategy, rb.Value("base-backup"))
		}
		if e.Spec().Version != vs[0] {
			t.Fatalf("spec version after the rollback: %s", e.Spec().Version)
		}
		rev := w.MaxRev()
		harness.Eventually(t, time.Minute, 100*time.Millisecond, "writes after the rollback", w.RevAbove(rev))
	})
	w.Finish(t) // every acknowledged write, through both restores across hosts
}

// TestHostsOfflineUpgrade: a single member on another host goes 3.5 ->
// 3.7 with the offline strategy: on 3.6 on a private client port until a
// raft snapshot is written (its agent reports it: the data dir is on that
// host), then on 3.7. The keyspace is the same afterwards.
func TestHostsOfflineUpgrade(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	hs := harness.NewHosts(t, 1)
	hs.Init(vs[0])
	hs.StartAgents()
	hs.MustRun("up")
	hs.WaitStatus(time.Minute, "one healthy member on another host", harness.Healthy)
	cli := hs.Client()
	defer cli.Close()
	for i := range 50 {
		if _, err := cli.Put(t.Context(), "offline/"+strconv.Itoa(i), strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	hs.MustRun("upgrade", "apply", "--to", vs[2], "--strategy", "offline")
	st := hs.WaitStatus(time.Minute, "the member healthy on "+vs[2], harness.Healthy)
	harness.RequireVersion(t, st, vs[2], "after the offline upgrade")
	p := harness.LatestPlan(t, hs.Env)
	m := hs.Spec().Members[0]
	if p.State != plan.Done || p.Strategy != "offline" || p.Value("snapshot."+m.Name) != vs[1] {
		t.Fatalf("plan %s: state %s, strategy %s, snapshot on %q (want %s)", p.ID, p.State, p.Strategy, p.Value("snapshot."+m.Name), vs[1])
	}
	r, err := cli.Get(t.Context(), "offline/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 50 {
		t.Fatalf("%d keys after the offline upgrade, want 50", len(r.Kvs))
	}
}
