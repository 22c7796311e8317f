package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/etcd-steward/steward/internal/filelock"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/hostset"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/spec"
)

// What restores and membership changes leave behind, and how it is
// bounded.
//
// Invariant: one restore at a time per Steward directory, held by the
// flock on DIR/run/restore.lock from before anything is checked until
// the restore returns (Run). Everything a restore stages
// (DATADIR.restoring-STAMP, here or on a host) is its own output; with the
// lock held, one found belongs to a restore that died, and is removed
// (stage: here; the agent's StageDataDir: on a host). The same lock keeps
// a restore from starting while a prune runs.
//
// Kept copies (datadir.Kept: pre-restore, removed, replaced, failed-add)
// are never removed by a restore or a membership change: the newest may
// hold writes no backup has. Prune removes what the operator asks for,
// never the newest Keep (at least 1) copies of each kind of each data dir,
// and nothing while a restore, a recovery or a plan is in progress.

// ErrRestoreRunning: another restore (or a prune) holds the restore lock.
var ErrRestoreRunning = errors.New("another restore is running")

// ErrPruneBusy: a restore, a recovery or a plan is in progress, which may
// still need any kept copy; a prune changes nothing then.
var ErrPruneBusy = errors.New("an operation in progress may need the kept copies")

func restoreLockPath(c *cluster.Cluster) string { return filepath.Join(c.Dir, "run", "restore.lock") }

// lockRestore takes the restore lock, or refuses (ErrRestoreRunning).
func lockRestore(c *cluster.Cluster, what string) (*filelock.Lock, error) {
	l, err := filelock.TryLock(restoreLockPath(c))
	if errors.Is(err, filelock.ErrHeld) {
		return nil, refusal.New(ErrRestoreRunning, "refusing to %s: another steward process is restoring this cluster or pruning its kept copies (%s is held); wait for it to finish", what, restoreLockPath(c))
	}
	return l, err
}

// removeStagedHere removes what interrupted restores staged beside the
// data dirs of the spec's members on this machine (the restore lock is
// held); members on hosts have theirs removed by their agent when it
// stages.
func removeStagedHere(c *cluster.Cluster) error {
	for _, m := range c.Spec.Members {
		if c.OnOtherHost(m) || m.DataDir == "" {
			continue
		}
		err := datadir.RemoveStaged(spec.Path(c.Dir, m.DataDir), func(p string) {
			c.Progress.Say("removed %s, which an interrupted restore staged for %s", p, m.Name)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// sayKeptHere tells how much the kept copies of this machine's data dirs
// take, so that their growth is seen at each restore.
func sayKeptHere(c *cluster.Cluster) {
	ks, err := datadir.FindKept(keptDirsHere(c))
	if err != nil || len(ks) == 0 {
		return
	}
	var n int64
	for _, k := range ks {
		n += k.Bytes
	}
	c.Progress.Say("%d copies of data dirs are kept aside on this machine, %s in all (the newest of each member is never pruned)", len(ks), progress.Bytes(n))
}

// Leftover is a kept copy where it lives.
type Leftover struct {
	datadir.Kept
	// Host is the agent of another host it is on; "" on this machine.
	Host string `json:"host,omitempty"`
	// Action is what a prune with the same Keep does (or did) to it:
	// "remove" ("removed" once done), or "keep" with Reason.
	Action string `json:"action"`
	Reason string `json:"reason,omitempty"`
}

// Leftovers is the list of kept copies, and what a prune does to them.
type Leftovers struct {
	Copies []Leftover `json:"copies"`
	// Bytes is the disk space of every copy listed; Reclaim that of the
	// ones a prune removes (or removed).
	Bytes   int64 `json:"bytes"`
	Reclaim int64 `json:"reclaim"`
	// Unlisted names the hosts whose copies are not listed, and why (an
	// agent not reached, or one older than the listing).
	Unlisted []string `json:"unlisted,omitempty"`
	// Busy says why a prune would refuse now ("" when it would not).
	Busy string `json:"busy,omitempty"`
}

// ListLeftovers lists the kept copies of every member's data dir, here
// and on the hosts, with what Prune with keep would do.
func ListLeftovers(ctx context.Context, c *cluster.Cluster, keep int) (Leftovers, error) {
	if keep < 1 {
		return Leftovers{}, fmt.Errorf("keep %d: %w: the newest copy of each data dir is always kept", keep, ErrBadKeep)
	}
	var out Leftovers
	ks, err := datadir.FindKept(keptDirsHere(c))
	if err != nil {
		return out, err
	}
	for _, k := range ks {
		out.Copies = append(out.Copies, Leftover{Kept: k})
	}
	rs := hostset.Each(ctx, hostset.Remote(c.Spec), hostset.Options{}, func(ctx context.Context, a spec.Agent) ([]datadir.Kept, error) {
		ac, err := c.Agent(a.Name)
		if err != nil {
			return nil, err
		}
		var ks []datadir.Kept
		err = ac.Kept(ctx, &ks)
		return ks, err
	})
	for _, r := range rs {
		if r.Err != nil {
			out.Unlisted = append(out.Unlisted, fmt.Sprintf("host %s: %v", r.Host.Name, r.Err))
			continue
		}
		for _, k := range r.Value {
			out.Copies = append(out.Copies, Leftover{Kept: k, Host: r.Host.Name})
		}
	}
	sortNewestLast(out.Copies)
	decide(out.Copies, keep)
	for _, l := range out.Copies {
		out.Bytes += l.Bytes
		if l.Action == "remove" {
			out.Reclaim += l.Bytes
		}
	}
	if err := pruneBusy(c); err != nil {
		out.Busy = err.Error()
	}
	return out, nil
}

// ErrBadKeep: a keep below 1 (the newest copy is always kept).
var ErrBadKeep = errors.New("not a number of copies to keep")

// decide marks each copy remove or keep: a copy of no member of this
// spec (Member "": a kept-style name in a shared parent dir, such as
// another cluster's) is always kept, a staged dir is removed (a restore's
// own output), and of the other kinds the newest keep of each data dir's
// kind are kept.
func decide(ls []Leftover, keep int) {
	newer := map[string]int{} // host, data dir and kind: copies newer than this one
	for i := len(ls) - 1; i >= 0; i-- {
		l := &ls[i]
		if l.Member == "" {
			l.Action, l.Reason = "keep", "not a data dir of this spec"
			continue
		}
		if l.Kind == datadir.KindRestoring {
			l.Action, l.Reason = "remove", ""
			continue
		}
		key := l.Host + "\x00" + l.DataDir + "\x00" + l.Kind
		n := newer[key]
		newer[key] = n + 1
		if n < keep {
			l.Action = "keep"
			l.Reason = fmt.Sprintf("one of the newest %d %s copies of %s", keep, l.Kind, l.DataDir)
			if keep == 1 {
				l.Reason = fmt.Sprintf("the newest %s copy of %s", l.Kind, l.DataDir)
			}
			continue
		}
		l.Action, l.Reason = "remove", ""
	}
}

// sortNewestLast orders copies by time, this machine's and the hosts'.
func sortNewestLast(ls []Leftover) {
	slices.SortStableFunc(ls, func(a, b Leftover) int { return a.Created.Compare(b.Created) })
}

// PruneLeftovers removes the copies ListLeftovers marks "remove" with the
// same keep, holding the restore lock; it refuses (ErrPruneBusy) while a
// restore, a recovery or a plan is in progress, and changes nothing then.
// A copy that cannot be removed is left and the first such error
// returned, with what was removed.
func PruneLeftovers(ctx context.Context, c *cluster.Cluster, keep int) (Leftovers, error) {
	lock, err := lockRestore(c, "prune kept copies")
	if err != nil {
		return Leftovers{}, refusal.New(ErrPruneBusy, "%s", err.Error())
	}
	defer lock.Release()
	if err := pruneBusy(c); err != nil {
		return Leftovers{}, err
	}
	out, err := ListLeftovers(ctx, c, keep)
	if err != nil {
		return out, err
	}
	var firstErr error
	out.Reclaim = 0
	for i := range out.Copies {
		l := &out.Copies[i]
		if l.Action != "remove" {
			continue
		}
		var err error
		if l.Host == "" {
			dirs, _ := keptDirsHere(c)
			err = datadir.RemoveKept(l.Path, dirs)
		} else if ac, aerr := c.Agent(l.Host); aerr != nil {
			err = aerr
		} else {
			err = ac.RemoveKept(ctx, l.Path)
		}
		if err != nil {
			l.Action, l.Reason = "keep", "not removed: "+err.Error()
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		l.Action = "removed"
		out.Reclaim += l.Bytes
		where := ""
		if l.Host != "" {
			where = " on host " + l.Host
		}
		c.Progress.Say("removed %s%s (%s)", l.Path, where, progress.Bytes(l.Bytes))
	}
	return out, firstErr
}

// pruneBusy refuses (ErrPruneBusy) while a restore or a recovery runs, a
// recovery is unfinished (its journal), or a plan is open: each may still
// need a copy it moved aside.
func pruneBusy(c *cluster.Cluster) error {
	if l, err := filelock.TryLock(filepath.Join(c.Dir, "run", "recover.lock")); err != nil {
		if errors.Is(err, filelock.ErrHeld) {
			return refusal.New(ErrPruneBusy, "refusing to prune kept copies: a recovery is running (%s is held)", filepath.Join(c.Dir, "run", "recover.lock"))
		}
		return err
	} else {
		l.Release()
	}
	// recovery's journal (pkg/recovery, journal.go): an unfinished
	// recovery, resumed by the next `recover`.
	if _, err := os.Stat(filepath.Join(c.Dir, "status", "recovery.json")); err == nil {
		return refusal.New(ErrPruneBusy, "refusing to prune kept copies: a recovery is unfinished (its journal %s is there): finish the recovery first", filepath.Join(c.Dir, "status", "recovery.json"))
	}
	_, err := plan.Admit(c.Plans(), plan.Admission{
		Locked: refusal.New(ErrPruneBusy, "refusing to prune kept copies: a plan is running"),
		Refuse: func(p *plan.Plan) error {
			return refusal.New(ErrPruneBusy, "refusing to prune kept copies: plan %s is %s and may still need them; finish or abort it first", p.ID, p.State)
		},
	})
	return err
}

// keptDirsHere are the directories kept copies of this machine's members
// live in: beside each data dir of a member on this machine, and
// DIR/members/* (a removed member's stays there); and the member a data
// dir path belongs to.
func keptDirsHere(c *cluster.Cluster) ([]string, func(string) string) {
	byDir := map[string]string{}
	for _, m := range c.Spec.Members {
		if c.OnOtherHost(m) || m.DataDir == "" {
			continue
		}
		byDir[filepath.Clean(spec.Path(c.Dir, m.DataDir))] = m.Name
	}
	return datadir.KeptDirs(c.Dir, byDir)
}
