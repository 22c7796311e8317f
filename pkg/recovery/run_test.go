package recovery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/filelock"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/handover"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
)

// fakeViews answers Run's reads in turn (the last one repeated) and
// records whether recover.lock was held at each.
type fakeViews struct {
	t      *testing.T
	views  []fakeView
	calls  int
	locked []bool
}

type fakeView struct {
	j       *recoveryJournal
	quorate bool
	// st, when set, is the status (quorate is then st's).
	st *status.Status
}

func (f *fakeViews) view(_ context.Context, c *cluster.Cluster) (*recoveryJournal, *status.Status, error) {
	f.locked = append(f.locked, lockHeld(f.t, c))
	v := f.views[min(f.calls, len(f.views)-1)]
	f.calls++
	if v.st != nil {
		return v.j, v.st, nil
	}
	st := &status.Status{}
	st.Cluster.Quorate = v.quorate
	return v.j, st, nil
}

// lockHeld says whether another holder has recover.lock.
func lockHeld(t *testing.T, c *cluster.Cluster) bool {
	l, err := filelock.TryLock(recoverLockPath(c))
	if errors.Is(err, filelock.ErrHeld) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	return false
}

func testCluster(t *testing.T) *cluster.Cluster {
	return &cluster.Cluster{Dir: t.TempDir(), Spec: &spec.Cluster{}, Progress: func(string, ...any) {}}
}

// TestRunReadsOnceUnderLock: Run reads the cluster's status once, with
// recover.lock held, and decides on that view: a recovery that finished
// before Run took the lock leaves a quorate view, and Run does nothing,
// instead of recovering the cluster just brought back. Before, Run read
// the status a first time without the lock and again under it: with
// quorum lost each read waits out the probe timeout (docs/benchmarks.md).
func TestRunReadsOnceUnderLock(t *testing.T) {
	c := testCluster(t)
	f := &fakeViews{t: t, views: []fakeView{{quorate: true}}}
	rep, err := run(t.Context(), c, runDeps{view: f.view})
	if err != nil || rep.Action != "none" || rep.Message != QuorateMessage {
		t.Fatalf("run = %+v, %v; want nothing done on the quorate view read under the lock", rep, err)
	}
	if len(f.locked) != 1 || !f.locked[0] {
		t.Fatalf("views read with recover.lock held: %v, want [true]", f.locked)
	}
}

// TestRunLockHeld: with recover.lock held by another recovery, Run reads
// the status once: quorate with no journal, it reports nothing to
// recover, as it did before it took the lock first; without quorum it
// refuses naming the lock, and changes nothing.
func TestRunLockHeld(t *testing.T) {
	for _, quorate := range []bool{true, false} {
		c := testCluster(t)
		l, err := filelock.TryLock(recoverLockPath(c))
		if err != nil {
			t.Fatal(err)
		}
		f := &fakeViews{t: t, views: []fakeView{{quorate: quorate}}}
		rep, err := run(t.Context(), c, runDeps{view: f.view})
		l.Release()
		switch {
		case f.calls != 1:
			t.Errorf("quorate %v: %d status reads, want 1", quorate, f.calls)
		case quorate && (err != nil || rep.Message != QuorateMessage):
			t.Errorf("quorate, lock held: run = %+v, %v; want %q", rep, err, QuorateMessage)
		case !quorate && (err == nil || !strings.Contains(err.Error(), "another steward process is recovering") || rep.Action != "none"):
			t.Errorf("quorum lost, lock held: run = %+v, %v; want the refusal naming the lock", rep, err)
		}
	}
}

// TestRunRefusesStaleReseed: a journal recording an unfinished rebuild
// from a survivor's own data while the cluster is quorate is stale (the
// seed serves no client during that rebuild): Run refuses with
// ErrStaleJournal and keeps the journal, instead of dropping or resuming
// it (which would stop every member of a healthy cluster). It refuses
// before it takes recover.lock (one view read, without the lock).
func TestRunRefusesStaleReseed(t *testing.T) {
	c := testCluster(t)
	j := &recoveryJournal{Seed: "etcd-9", SeededAt: time.Now().UTC(), Reseeding: true}
	if err := writeRecoveryJournal(t.Context(), c, j); err != nil {
		t.Fatal(err)
	}
	f := &fakeViews{t: t, views: []fakeView{{j: j, quorate: true}}}
	rep, err := run(t.Context(), c, runDeps{view: f.view})
	if !errors.Is(err, ErrStaleJournal) || rep.Action != "none" {
		t.Fatalf("run = %+v, %v; want ErrStaleJournal and nothing done", rep, err)
	}
	for _, want := range []string{"etcd-9", "quorate", "nothing was changed", recoveryJournalPath(c)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if got, err := readRecoveryJournal(c); err != nil || got == nil {
		t.Fatalf("journal after the refusal: %v, %v; want it kept", got, err)
	}
	if fmt.Sprint(f.locked) != "[false]" {
		t.Errorf("views read with recover.lock held: %v, want [false] (refused before the lock)", f.locked)
	}
	// A stale journal seen only under the lock (the cluster became
	// quorate meanwhile) is refused there too.
	f = &fakeViews{t: t, views: []fakeView{{j: j, quorate: false}, {j: j, quorate: true}}}
	if _, err := run(t.Context(), c, runDeps{view: f.view}); !errors.Is(err, ErrStaleJournal) || fmt.Sprint(f.locked) != "[false true]" {
		t.Errorf("stale only under the lock: %v, views locked %v; want ErrStaleJournal on the second, locked read", err, f.locked)
	}
	// A reseed journal while quorum is lost is a real one: not stale.
	if err := staleReseed(c, j, false); err != nil {
		t.Fatalf("staleReseed without quorum: %v", err)
	}
}

// TestRunFencedUnderLock: for a multi-host spec, Run checks that this
// directory is still the coordinator once recover.lock is held and before
// it stops any member, so a manual recovery on a coordinator another
// machine took over from refuses with handover.ErrSuperseded, changing
// nothing (with no member stopped, and the journal kept).
func TestRunFencedUnderLock(t *testing.T) {
	c := testCluster(t)
	c.Spec.Agents = []spec.Agent{{Name: "cp-1", Host: "10.0.0.1", Port: 2381}}
	c.Spec.Members = []spec.Member{{Name: "etcd-1", Agent: "cp-1"}}
	j := &recoveryJournal{Seed: "etcd-1", SeededAt: time.Now().UTC()}
	if err := writeRecoveryJournal(t.Context(), c, j); err != nil {
		t.Fatal(err)
	}
	f := &fakeViews{t: t, views: []fakeView{{j: j, quorate: false}}}
	var fencedLocked []bool
	superseded := func(_ context.Context, c *cluster.Cluster) error {
		fencedLocked = append(fencedLocked, lockHeld(t, c))
		return fmt.Errorf("not acting: %w: generation 2", handover.ErrSuperseded)
	}
	rep, err := run(t.Context(), c, runDeps{view: f.view, fence: superseded})
	if !errors.Is(err, handover.ErrSuperseded) || rep.Action != "none" {
		t.Fatalf("run = %+v, %v; want handover.ErrSuperseded and nothing done", rep, err)
	}
	if len(fencedLocked) != 1 || !fencedLocked[0] {
		t.Fatalf("fence checked with recover.lock held: %v, want [true]", fencedLocked)
	}
	if got, err := readRecoveryJournal(c); err != nil || got == nil {
		t.Fatalf("journal after the refusal: %v, %v; want it kept", got, err)
	}
}

// threeHosts is a multi-host cluster: etcd-N on host cp-N.
func threeHosts(t *testing.T) *cluster.Cluster {
	c := testCluster(t)
	for i := 1; i <= 3; i++ {
		c.Spec.Agents = append(c.Spec.Agents, spec.Agent{Name: fmt.Sprintf("cp-%d", i), Host: fmt.Sprintf("127.0.0.%d", i), Port: 1})
		c.Spec.Members = append(c.Spec.Members, spec.Member{Name: fmt.Sprintf("etcd-%d", i), Agent: fmt.Sprintf("cp-%d", i)})
	}
	return c
}

// hostsStatus is a status of threeHosts without quorum as the coordinator
// sees it: reachable says which agents answer, process what each reports,
// healthy which members serve.
func hostsStatus(reachable []bool, process []string, healthy []bool) *status.Status {
	st := &status.Status{}
	for i := range reachable {
		st.Agents = append(st.Agents, status.AgentStatus{Name: fmt.Sprintf("cp-%d", i+1), Reachable: reachable[i]})
		st.Members = append(st.Members, status.MemberStatus{Name: fmt.Sprintf("etcd-%d", i+1), Process: process[i], Healthy: healthy[i]})
	}
	return st
}

// TestAutoResumeRechecksDecide ("recovery resume path skips Decide when
// falling through"): the automatic loop resumes a journaled recovery
// without Decide (its seed alone may be the cluster); on a multi-host
// cluster run must then check Decide, on a fresh view, before each
// disruptive action: stopping a seed that does not serve, rebuilding one,
// stopping every member. With agents that do not answer (a majority may
// be alive where the coordinator cannot see it) it stops with
// ErrNotProven, naming the action and Decide's reason, before any member
// is stopped, and keeps the journal; so does a resume whose seed left the
// spec, which falls through to a fresh recovery. Before the fix it went
// on to stop the seed, or every member. With every member
// reported stopped by its own agent, the check passes.
func TestAutoResumeRechecksDecide(t *testing.T) {
	noFence := func(context.Context, *cluster.Cluster) error { return nil }
	unseen := hostsStatus([]bool{true, false, false}, []string{"Running", "", ""}, []bool{false, false, false})
	for _, tc := range []struct {
		name   string
		j      *recoveryJournal
		st     *status.Status
		before string
	}{
		{"seed not serving", &recoveryJournal{Seed: "etcd-1", SeededAt: time.Now().UTC()}, unseen, "stopping seed etcd-1"},
		{"reseed not rebuilt", &recoveryJournal{Seed: "etcd-1", SeededAt: time.Now().UTC(), Reseeding: true},
			hostsStatus([]bool{true, false, false}, []string{"Running", "", ""}, []bool{true, false, false}), "rebuilding seed etcd-1"},
		{"seed gone, falling through", &recoveryJournal{Seed: "etcd-9", SeededAt: time.Now().UTC()}, unseen, "stopping every member"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := threeHosts(t)
			if err := writeRecoveryJournal(t.Context(), c, tc.j); err != nil {
				t.Fatal(err)
			}
			f := &fakeViews{t: t, views: []fakeView{{j: tc.j, st: tc.st}}}
			rep, err := run(t.Context(), c, runDeps{view: f.view, fence: noFence, auto: true})
			if !errors.Is(err, ErrNotProven) {
				t.Fatalf("run = %+v, %v; want ErrNotProven before %s", rep, err, tc.before)
			}
			for _, want := range []string{tc.before, "do not answer", "cp-2"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if got, err := readRecoveryJournal(c); err != nil || got == nil {
				t.Fatalf("journal after the refusal: %v, %v; want it kept", got, err)
			}
			if f.calls < 2 {
				t.Errorf("views read: %d, want run's under the lock and a fresh one for the check (2)", f.calls)
			}
		})
	}
	// Proven: every agent answers and reports its member stopped.
	c := threeHosts(t)
	down := hostsStatus([]bool{true, true, true}, []string{"Stopped", "Stopped", "Failed"}, []bool{false, false, false})
	f := &fakeViews{t: t, views: []fakeView{{st: down}}}
	if err := (runDeps{view: f.view, auto: true}).proven(t.Context(), c, "x"); err != nil {
		t.Fatalf("proven with every member reported stopped: %v", err)
	}
	f = &fakeViews{t: t, views: []fakeView{{st: unseen}}}
	if err := (runDeps{view: f.view}).proven(t.Context(), c, "x"); err != nil {
		t.Fatalf("proven for a manual recovery: %v, want no check", err)
	}
}

// TestEarlierTimeline: a valid data dir below the revision the spec's
// timeline began at is of an earlier timeline (a restore into the seed
// interrupted before the seed ran alone leaves the old members' data
// beside it) and is not counted; one at or above it is; without a
// timeline (never restored) every valid data dir counts.
func TestEarlierTimeline(t *testing.T) {
	tl := &spec.Timeline{ID: 2, Parent: 1, BranchRevision: 355, StartRevision: 1_000_000_355}
	for _, tc := range []struct {
		name string
		f    datadir.Finding
		tl   *spec.Timeline
		want bool
	}{
		{"old member beside a restored seed", datadir.Finding{State: datadir.Valid, Revision: 420}, tl, true},
		{"the restored seed", datadir.Finding{State: datadir.Valid, Revision: 1_000_000_355}, tl, false},
		{"a member of this timeline", datadir.Finding{State: datadir.Valid, Revision: 1_000_000_900}, tl, false},
		{"never restored", datadir.Finding{State: datadir.Valid, Revision: 420}, nil, false},
		{"empty", datadir.Finding{State: datadir.Empty}, tl, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := earlierTimeline(tc.f, tc.tl)
			if got != tc.want || got != (why != "") {
				t.Fatalf("earlierTimeline = %v %q, want %v", got, why, tc.want)
			}
			if got && !strings.Contains(why, "earlier timeline than the cluster's timeline 2, which began at revision 1000000355") {
				t.Errorf("reason %q", why)
			}
		})
	}
}
