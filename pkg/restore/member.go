package restore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/spec"
)

// memberSource is a stopped member's own database (Options.FromMember):
// recovery's reseed rebuilds its seed from it, so the seed resumes above
// every revision the cluster ever served, on a new timeline, as a restore
// does. The database must hold every entry its WAL committed (etcd
// applied them on its last run; recovery runs the seed once with
// --force-new-cluster first): a rebuilt data dir has a fresh raft log, and
// what the old WAL held beyond the database would be lost.
type memberSource struct {
	c *cluster.Cluster
	m spec.Member
}

// openMember refuses options that choose or read backups (the member's
// database is the one revision it holds) and a member not in the spec.
func openMember(c *cluster.Cluster, o Options) (*memberSource, error) {
	if o.FromSnapshot != "" || (o.Backup != "" && o.Backup != "latest") || o.ToRevision != 0 || !o.ToTime.IsZero() || o.Timeline != 0 {
		return nil, fmt.Errorf("restoring from member %s's own database: a snapshot file, a backup, a target or a timeline cannot be given with it: %w", o.FromMember, ErrSourceConflict)
	}
	m, err := c.Member(o.FromMember)
	if err != nil {
		return nil, err
	}
	return &memberSource{c: c, m: m}, nil
}

// memberTimeline is the timeline a member's own database is on, which a
// restore from it (recovery's reseed) branches off: the cluster's current
// one, by the rule a restore from the store uses (currentTimeline): the
// spec's, or, when the spec records none (a new Steward directory on a
// store that branched), the newest committed one in the store, never one
// a killed restore or rebuild recorded and never served.
func memberTimeline(c *cluster.Cluster, hist backup.History) int64 {
	return currentTimeline(c, hist)
}

// fetch copies the member's database to dst (from its host through its
// agent, or from its data dir here) after checking that it holds every
// committed entry. The member's data dir is only read.
func (s *memberSource) fetch(ctx context.Context, dst string) (prepared, error) {
	p := prepared{snapshot: dst, from: "the database of member " + s.m.Name}
	var applied, committed uint64
	var err error
	if s.c.OnOtherHost(s.m) {
		rt, rerr := s.c.RuntimeFor(s.m)
		if rerr != nil {
			return p, rerr
		}
		ai, aerr := rt.Applied(ctx, s.m.Name)
		if aerr != nil {
			return p, fmt.Errorf("member %s on host %s: %w", s.m.Name, s.m.Agent, aerr)
		}
		applied, committed = ai.Applied, ai.Committed
		if applied >= committed {
			err = rt.FetchDatabase(ctx, s.m.Name, dst)
		}
	} else {
		dd := spec.Path(s.c.Dir, s.m.DataDir)
		if applied, committed, err = datadir.Applied(dd); err == nil && applied >= committed {
			err = copyDatabase(filepath.Join(dd, "member", "snap", "db"), dst)
		}
	}
	if err != nil {
		return p, fmt.Errorf("the database of member %s: %w", s.m.Name, err)
	}
	if applied < committed {
		return p, fmt.Errorf("the database of member %s has applied raft index %d, but its WAL committed %d: it does not hold every committed write yet (run the member once so etcd applies them)", s.m.Name, applied, committed)
	}
	if p.revision, err = datadir.Revision(dst); err != nil {
		return p, fmt.Errorf("the database of member %s: %w", s.m.Name, err)
	}
	s.c.Progress.Say("copied the database of %s (revision %d, every committed entry applied)", s.m.Name, p.revision)
	return p, nil
}

// copyDatabase copies a stopped member's database file to dst (0600,
// created: dst must not exist), synced; on failure dst is removed.
func copyDatabase(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(dst)
		}
	}()
	_, err = io.Copy(out, in)
	err = errors.Join(err, out.Sync(), out.Close())
	return err
}
