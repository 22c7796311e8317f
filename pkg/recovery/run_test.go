package recovery

import (
	"context"
	"errors"
	"testing"

	"github.com/etcd-steward/steward/internal/filelock"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/spec"
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

func (f *fakeViews) view(_ context.Context, c *cluster.Cluster) (*recoveryJournal, *cluster.Status, error) {
	f.locked = append(f.locked, lockHeld(f.t, c))
	v := f.views[min(f.calls, len(f.views)-1)]
	f.calls++
	st := &cluster.Status{}
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
	if err != nil || rep.Action != "none" || rep.Message != quorateMessage {
		t.Fatalf("run = %+v, %v; want nothing done on the quorate view read under the lock", rep, err)
	}
	if len(f.locked) != 2 || f.locked[0] || !f.locked[1] {
		t.Fatalf("views read with recover.lock held: %v, want [false true]", f.locked)
	}
}
