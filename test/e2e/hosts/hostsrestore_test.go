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
// converges. In the rollback, the second member's agent is killed once it
// staged that member's new data dir (the step fails naming its host), and,
// on the resume, the coordinator after the first member's was built again;
// the next resume converges. Every acknowledged write is there at the end,
// and the old data dirs stay on their hosts.
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
	var upgradedDir string // the first member's data dir after the upgrade

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
		upgraded := e.Spec()
		upgradedDir = upgraded.Members[0].DataDir
		for i, m := range upgraded.Members {
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
	t.Run("rollback by restore to "+vs[0]+", an agent and the coordinator killed mid-replace", func(t *testing.T) {
		e := hs.Env.For(t)
		// The second member's agent dies once it has staged that member's
		// new data dir (the backup with the keyspace grafted in), before
		// it answers: the step fails naming its host.
		second := before.Members[1]
		h := hs.Host(second.Agent)
		h.KillAgent()
		h.Env = []string{crashpoint.EnvVar + "=" + crashpoint.AgentStageStaged}
		h.StartAgent(t, "")
		e.WaitStatus(time.Minute, "healthy with the restarted agent", harness.Healthy)
		msg := e.MustFail("rollback", "--strategy", "restore")
		if !strings.Contains(msg, second.Name) || !strings.Contains(msg, "host "+second.Agent) {
			t.Fatalf("the failed step does not name %s on host %s: %s", second.Name, second.Agent, msg)
		}
		if log, _ := os.ReadFile(filepath.Join(h.Dir, "logs", "agent-"+h.Name+".log")); !strings.Contains(string(log), "crashpoint: "+crashpoint.AgentStageStaged) {
			t.Fatalf("the agent of host %s was not killed at %s: %s", h.Name, crashpoint.AgentStageStaged, msg)
		}
		if sp := e.Spec(); sp.Version != vs[1] || sp.Members[0].DataDir != upgradedDir {
			t.Fatalf("the spec changed before every new data dir was built: %+v", e.Spec().Members[0])
		}
		h.Env = nil
		h.StartAgent(t, "")
		// Then the coordinator is killed after the first member's new data
		// dir was built again, and resumed.
		point := crashpoint.Indexed(crashpoint.ReplaceBuilt, 0)
		_, se, err := e.RunEnv([]string{crashpoint.EnvVar + "=" + point}, "plan", "resume")
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
