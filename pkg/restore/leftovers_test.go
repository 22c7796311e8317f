package restore

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/filelock"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestDecide: of each data dir's kind (per host), the newest keep copies
// are kept, never fewer than one; staged dirs are removed.
func TestDecide(t *testing.T) {
	at := func(h int) time.Time { return time.Date(2026, 11, 27, h, 0, 0, 0, time.UTC) }
	mk := func(host, dd, kind string, h int) Leftover {
		return Leftover{Host: host, Kept: datadir.Kept{Kind: kind, Member: "m", DataDir: dd, Created: at(h)}}
	}
	// Copies of no member of this spec (another cluster's, in a shared
	// parent dir): kept whatever their kind or age.
	foreign := func(kind string, h int) Leftover {
		l := mk("", "/d/shared/b-1", kind, h)
		l.Member = ""
		return l
	}
	ls := []Leftover{
		mk("", "/d/m1/data", datadir.KindPreRestore, 1),
		mk("", "/d/m1/data", datadir.KindPreRestore, 2),
		mk("", "/d/m1/data", datadir.KindPreRestore, 3),
		mk("", "/d/m1/data", datadir.KindReplaced, 1),
		mk("h2", "/d/m1/data", datadir.KindPreRestore, 1), // another host's same path
		mk("", "/d/m2/data", datadir.KindRestoring, 4),
		foreign(datadir.KindRestoring, 5),
		foreign(datadir.KindPreRestore, 1),
		foreign(datadir.KindPreRestore, 2),
	}
	for _, tt := range []struct {
		keep int
		want []string // in the order of ls
	}{
		{1, []string{"remove", "remove", "keep", "keep", "keep", "remove", "keep", "keep", "keep"}},
		{2, []string{"remove", "keep", "keep", "keep", "keep", "remove", "keep", "keep", "keep"}},
		{5, []string{"keep", "keep", "keep", "keep", "keep", "remove", "keep", "keep", "keep"}},
	} {
		c := append([]Leftover(nil), ls...)
		sortNewestLast(c)
		decide(c, tt.keep)
		for i, l := range ls {
			for _, d := range c {
				if d.Host == l.Host && d.DataDir == l.DataDir && d.Kind == l.Kind && d.Created.Equal(l.Created) && d.Action != tt.want[i] {
					t.Errorf("keep %d: %q %s %s %v: %s (%s), want %s", tt.keep, d.Host, d.DataDir, d.Kind, d.Created, d.Action, d.Reason, tt.want[i])
				}
			}
		}
	}
}

// TestPruneRefusesWhileBusy: a prune refuses (ErrPruneBusy) and removes
// nothing while a restore holds the restore lock, a recovery holds its
// lock or left its journal, or a plan is open; once none is, it removes
// the older copy and keeps the newest.
func TestPruneRefusesWhileBusy(t *testing.T) {
	dir := t.TempDir()
	c := &cluster.Cluster{Dir: dir, Spec: &spec.Cluster{Members: []spec.Member{{Name: "m1", DataDir: "members/m1/data"}}}}
	older := filepath.Join(dir, "members", "m1", "data.pre-restore-20261127T100000.000Z")
	newer := filepath.Join(dir, "members", "m1", "data.pre-restore-20261127T110000.000Z")
	for _, p := range []string{filepath.Join(dir, "members", "m1", "data"), older, newer} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	busy := func(what string) {
		t.Helper()
		if _, err := PruneLeftovers(t.Context(), c, 1); !errors.Is(err, ErrPruneBusy) {
			t.Errorf("%s: prune = %v, want ErrPruneBusy", what, err)
		}
		if _, err := os.Stat(older); err != nil {
			t.Fatalf("%s: a refused prune removed %s", what, older)
		}
	}
	for _, lock := range []string{"restore.lock", "recover.lock"} {
		l, err := filelock.TryLock(filepath.Join(dir, "run", lock))
		if err != nil {
			t.Fatal(err)
		}
		busy(lock + " held")
		l.Release()
	}
	journal := filepath.Join(dir, "status", "recovery.json")
	if err := os.MkdirAll(filepath.Dir(journal), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(journal, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	busy("an unfinished recovery")
	if err := os.Remove(journal); err != nil {
		t.Fatal(err)
	}
	st := c.Plans()
	p := &plan.Plan{ID: "p1", Kind: "upgrade", State: plan.Failed, CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := st.Save(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	busy("a failed plan")
	p.State = plan.Done
	if err := st.Save(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	l, err := PruneLeftovers(t.Context(), c, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(older); err == nil || len(l.Copies) != 2 {
		t.Errorf("prune: %+v, want the older copy removed", l)
	}
	if _, err := os.Stat(newer); err != nil {
		t.Errorf("prune removed the newest copy: %v", err)
	}
}
