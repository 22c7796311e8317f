package hosts_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/restore"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/upgrade"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// TestHostsUpgradeByRestore: three members on three hosts go 3.5 -> 3.6
// with `upgrade --strategy restore` and back with `rollback --strategy
// restore`, under a writer, each plan killed at every point in one chain
// (restoreKilledEverywhere): the coordinator before and after every step
// and inside the replace step, and one host's agent at each of its points
// of the members' builds, each kill followed by `plan resume`. The old data
// dirs stay whole on their hosts through and after each plan; the copies
// the killed attempts' builds left are pruned by `restore leftovers
// --prune` after the plans, down to the newest of each data dir. Every
// acknowledged write is there at the end.
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
	var upgraded *spec.Cluster

	if !t.Run("upgrade by restore to "+vs[1]+", killed at every point", func(t *testing.T) {
		e := hs.Env.For(t)
		start := time.Now()
		restoreKilledEverywhere(t, hs, e, before.Members[1], vs[0], "upgrade", "apply", "--to", vs[1], "--strategy", "restore")
		t.Logf("the upgrade, killed at every point, took %s", time.Since(start).Round(time.Second))
		st := e.WaitStatus(time.Minute, "every member healthy on "+vs[1], harness.Healthy)
		harness.RequireVersion(t, st, vs[1], "after the upgrade by restore")
		p := harness.LatestPlan(t, e)
		v := harness.UpgradePayload(t, p)
		if p.State != plan.Done || v.Strategy != "restore" || v.To != vs[1] {
			t.Fatalf("upgrade plan %s: state %s, strategy %s, to %s", p.ID, p.State, v.Strategy, v.To)
		}
		upgraded = e.Spec()
		for i, m := range upgraded.Members {
			if !strings.HasSuffix(m.DataDir, "-v"+vs[1]) {
				t.Errorf("member %s: data dir %s, want a new one for %s", m.Name, m.DataDir, vs[1])
			}
			if fi, err := os.Stat(filepath.Join(hs.Host(m.Agent).Dir, m.DataDir)); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("member %s: the new data dir on host %s: %v %v", m.Name, m.Agent, fi, err)
			}
			// The old data dir stays whole on its host, for a rollback.
			requireWhole(t, hs, before.Members[i], "after the upgrade")
		}
		rev := w.MaxRev()
		harness.Eventually(t, time.Minute, 100*time.Millisecond, "writes after the upgrade", w.RevAbove(rev+50))
	}) {
		return
	}
	if !t.Run("rollback by restore to "+vs[0]+", killed at every point", func(t *testing.T) {
		e := hs.Env.For(t)
		start := time.Now()
		restoreKilledEverywhere(t, hs, e, upgraded.Members[2], vs[0], "rollback", "--strategy", "restore")
		t.Logf("the rollback, killed at every point, took %s", time.Since(start).Round(time.Second))
		st := e.WaitStatus(time.Minute, "every member back on "+vs[0], harness.Healthy)
		harness.RequireVersion(t, st, vs[0], "after the rollback by restore")
		rb := harness.LatestPlan(t, e)
		v := harness.UpgradePayload(t, rb)
		if rb.Kind != plan.KindRollback || rb.State != plan.Done || v.Strategy != "restore" || rb.Value("base-backup") == "" {
			t.Fatalf("rollback plan %s: kind %s, state %s, strategy %s, base backup %q", rb.ID, rb.Kind, rb.State, v.Strategy, rb.Value("base-backup"))
		}
		sp := e.Spec()
		if sp.Version != vs[0] {
			t.Fatalf("spec version after the rollback: %s", sp.Version)
		}
		for i, m := range sp.Members {
			if !strings.HasSuffix(m.DataDir, "-v"+vs[0]) {
				t.Errorf("member %s: data dir %s, want a new one for %s", m.Name, m.DataDir, vs[0])
			}
			requireWhole(t, hs, before.Members[i], "after the rollback")
			requireWhole(t, hs, upgraded.Members[i], "after the rollback")
		}
		rev := w.MaxRev()
		harness.Eventually(t, time.Minute, 100*time.Millisecond, "writes after the rollback", w.RevAbove(rev))
	}) {
		return
	}
	w.Finish(t) // every acknowledged write, through both plans killed everywhere

	// The killed attempts' builds were moved aside on their hosts (each
	// rebuild moves the earlier one aside); a prune, the plans done, keeps
	// the newest copy of each data dir and never the data dirs themselves.
	leftovers := func(args ...string) restore.Leftovers {
		var l restore.Leftovers
		out := hs.MustRun(append([]string{"restore", "leftovers", "-o", "json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatalf("restore leftovers: %v\n%s", err, out)
		}
		if len(l.Unlisted) > 0 {
			t.Fatalf("restore leftovers: hosts not listed: %v", l.Unlisted)
		}
		return l
	}
	listed := leftovers()
	remove := 0
	for _, c := range listed.Copies {
		if c.Kind != datadir.KindPreRestore || c.Host == "" {
			t.Errorf("a kept copy after the plans: %+v; want only pre-restore copies of the new data dirs, on the hosts", c)
		}
		if c.Action == "remove" {
			remove++
		}
	}
	if remove == 0 {
		t.Fatalf("no kept copy to prune after two plans with killed builds: %+v", listed.Copies)
	}
	pruned := leftovers("--prune")
	kept := map[string]int{}
	for _, c := range leftovers().Copies {
		kept[c.Host+":"+c.DataDir]++
		if kept[c.Host+":"+c.DataDir] > 1 {
			t.Errorf("after the prune, more than one copy of %s on host %s is kept", c.DataDir, c.Host)
		}
	}
	t.Logf("pruned %d of %d kept copies (%d bytes)", remove, len(listed.Copies), pruned.Reclaim)
	for i := range before.Members {
		requireWhole(t, hs, before.Members[i], "after the prune")
		requireWhole(t, hs, upgraded.Members[i], "after the prune")
	}
}

// restoreKilledEverywhere runs a plan by restore (`steward ARGS`: an
// upgrade or a rollback, every member stopped and rebuilt from one
// database) killed at every point, chained, on one cluster: the
// coordinator before and after each step (harness.KillAtEveryStepWith),
// and inside the replace step, after the kill before it, first the agent
// of victim's host at each of its points (crashpoint.AgentPoints: the
// snapshot received, staged, the old name moved aside, the version record
// put in place, committed), each failing a `plan resume` that names the
// member and its host, the agent started again armed at the next point;
// then the coordinator after each member's new data dir was built
// (replace-built:N) and once the spec names the new dirs
// (replace-spec-saved). Until that save the spec names the old data dirs
// and they stay whole on their hosts; so do they after it. record is the
// version the new data dirs' records must say.
func restoreKilledEverywhere(t *testing.T, hs *harness.Hosts, e *harness.Env, victim spec.Member, record string, args ...string) {
	t.Helper()
	old := e.Spec()
	requireOld := func(when string) {
		t.Helper()
		sp := e.Spec()
		for i, m := range sp.Members {
			if m.DataDir != old.Members[i].DataDir || sp.Version != old.Version {
				t.Fatalf("%s: the spec changed before every new data dir was built: version %s, %s on %s", when, sp.Version, m.Name, m.DataDir)
			}
			requireWhole(t, hs, m, when)
		}
	}
	within := func(p *plan.Plan, k int) int {
		if p.Steps[k].Kind != upgrade.StepReplace {
			return 0
		}
		to := harness.UpgradePayload(t, *p).To
		n := 0
		h := hs.Host(victim.Agent)
		h.KillAgent()
		for _, point := range crashpoint.AgentPoints {
			h.Env = []string{crashpoint.EnvVar + "=" + point}
			start := time.Now()
			h.StartAgent(t, "")
			started := time.Since(start)
			msg := e.MustFail("plan", "resume")
			n++
			if !strings.Contains(msg, victim.Name) || !strings.Contains(msg, "host "+victim.Agent) {
				t.Fatalf("agent killed at %s: the failed step does not name %s on host %s: %s", point, victim.Name, victim.Agent, msg)
			}
			if log, _ := os.ReadFile(filepath.Join(h.Dir, "logs", "agent-"+h.Name+".log")); !strings.Contains(string(log), "crashpoint: "+point+"\n") {
				t.Fatalf("the agent of host %s was not killed at %s: %s", h.Name, point, msg)
			}
			if p := harness.LatestPlan(t, e); p.State != plan.Failed || p.Steps[k].State != plan.Failed || p.Steps[k].Attempts != 1+n {
				t.Fatalf("agent killed at %s: %s", point, harness.StepStates(p))
			}
			requireOld("agent killed at " + point)
			t.Logf("agent of host %s killed at %s after %s (%s of it to start the agent)", h.Name, point, time.Since(start).Round(time.Millisecond), started.Round(time.Millisecond))
		}
		h.Env = nil
		h.StartAgent(t, "")
		for i := range old.Members {
			point := crashpoint.Indexed(crashpoint.ReplaceBuilt, i)
			harness.RunKilledAt(t, e, point, "plan", "resume")
			n++
			requireOld("coordinator killed at " + point)
			// The new data dirs built so far, on their hosts, with version
			// records saying the version their database ran on.
			for _, b := range old.Members[:i+1] {
				nd := filepath.Join(hs.Host(b.Agent).Dir, newDir(b.DataDir, to))
				rec, ok, err := datadir.ReadRecord(nd)
				if _, serr := os.Stat(filepath.Join(nd, "member", "snap", "db")); serr != nil || !ok || err != nil || rec.Version != record {
					t.Fatalf("killed at %s: member %s: new data dir %s on host %s: %v; version record %+v %v %v (want %s)", point, b.Name, nd, b.Agent, serr, rec, ok, err, record)
				}
			}
		}
		harness.RunKilledAt(t, e, crashpoint.ReplaceSpecSaved, "plan", "resume")
		n++
		for i, m := range e.Spec().Members {
			if want := newDir(old.Members[i].DataDir, to); m.DataDir != want {
				t.Fatalf("killed at %s: member %s: the spec names %s, want %s", crashpoint.ReplaceSpecSaved, m.Name, m.DataDir, want)
			}
			requireWhole(t, hs, old.Members[i], "coordinator killed at "+crashpoint.ReplaceSpecSaved)
		}
		return n
	}
	harness.KillAtEveryStepWith(t, e, harness.StepKills{Within: within}, args...)
	// Nothing staged is left on any host: every kill's staged dir (and its
	// version record) was removed or put in place by a later attempt.
	for _, h := range hs.Hosts {
		_ = filepath.WalkDir(h.Dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && strings.Contains(d.Name(), ".restoring-") {
				t.Errorf("host %s: %s left by a killed build", h.Name, path)
			}
			return err
		})
	}
}

// newDir is the data dir a plan by restore to target gives a member whose
// data dir is dataDir (pkg/upgrade: the version suffix swapped).
func newDir(dataDir, target string) string {
	return versionSuffix.ReplaceAllString(dataDir, "") + "-v" + target
}

var versionSuffix = regexp.MustCompile(`-v\d+\.\d+\.\d+$`)

// requireWhole fails unless member m's data dir is whole on its host.
func requireWhole(t *testing.T, hs *harness.Hosts, m spec.Member, when string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(hs.Host(m.Agent).Dir, m.DataDir, "member", "snap", "db")); err != nil {
		t.Fatalf("%s: member %s: data dir %s on host %s: %v", when, m.Name, m.DataDir, m.Agent, err)
	}
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
	v := harness.UpgradePayload(t, p)
	if p.State != plan.Done || v.Strategy != "offline" || p.Value("snapshot."+m.Name) != vs[1] {
		t.Fatalf("plan %s: state %s, strategy %s, snapshot on %q (want %s)", p.ID, p.State, v.Strategy, p.Value("snapshot."+m.Name), vs[1])
	}
	r, err := cli.Get(t.Context(), "offline/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 50 {
		t.Fatalf("%d keys after the offline upgrade, want 50", len(r.Kvs))
	}
}
