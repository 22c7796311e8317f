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
}

func (f *fakeViews) view(_ context.Context, c *cluster.Cluster) (*recoveryJournal, *status.Status, error) {
	f.locked = append(f.locked, lockHeld(f.t, c))
	v := f.views[min(f.calls, len(f.views)-1)]
	f.calls++
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

// TestRunRereadsUnderLock: a recovery that finished between Run's first
// look (quorum lost) and its taking recover.lock leaves nothing to do: Run
// reads again under the lock and does nothing, instead of recovering the
// cluster just brought back.
func TestRunRereadsUnderLock(t *testing.T) {
	c := testCluster(t)
	f := &fakeViews{t: t, views: []fakeView{{quorate: false}, {quorate: true}}}
	rep, err := run(t.Context(), c, runDeps{view: f.view})
	if err != nil || rep.Action != "none" || rep.Message != QuorateMessage {
		t.Fatalf("run = %+v, %v; want nothing done on the quorate view read under the lock", rep, err)
	}
	if len(f.locked) != 2 || f.locked[0] || !f.locked[1] {
		t.Fatalf("views read with recover.lock held: %v, want [false true]", f.locked)
	}
}

// TestRunRefusesStaleReseed: a journal recording an unfinished rebuild
// from a survivor's own data while the cluster is quorate is stale (the
// seed serves no client during that rebuild): Run refuses with
// ErrStaleJournal and keeps the journal, instead of dropping or resuming
// it (which would stop every member of a healthy cluster).
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
