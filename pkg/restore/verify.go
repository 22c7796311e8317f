package restore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/etcd-steward/steward/internal/scratch"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
)

// List lists the cluster's complete, trusted backups, oldest first, and the
// manifests it ignored (corrupt, unauthenticated, forged), with the reason.
func List(ctx context.Context, c *cluster.Cluster) (backup.Listing, error) {
	store, err := c.BackupStore(ctx)
	if err != nil {
		return backup.Listing{}, err
	}
	return c.Backups(ctx, store, false)
}

// VerifyResult reports one backup's verification.
type VerifyResult struct {
	ID    string `json:"id"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Err is the error Error says, for errors.Is (nil for a gap in the
	// delta chain, which is no single backup's error).
	Err error `json:"-"`
}

// Verify fetches each named backup (all when id is "") and checks
// its checksums, key, database consistency, revision and hash.
//
// Only authenticated manifests are verified unless allowUnauthenticated;
// with id "" (all), every manifest that is not trusted is reported as a
// failed result, and every other backup is still verified.
func Verify(ctx context.Context, c *cluster.Cluster, id, keyFile string, allowUnauthenticated bool) ([]VerifyResult, error) {
	store, err := c.BackupStore(ctx)
	if err != nil {
		return nil, err
	}
	listing, err := c.Backups(ctx, store, allowUnauthenticated)
	if err != nil {
		return nil, err
	}
	var ms []backup.Manifest
	var out []VerifyResult
	if id == "" {
		ms = listing.Backups
		// A manifest that is not trusted fails verification, and the
		// others are still verified.
		for _, i := range listing.Ignored {
			r := VerifyResult{ID: "manifest:" + i.Name, Error: i.Reason, Err: i.Err}
			c.Progress.Say("%s: FAILED: %s", r.ID, r.Error)
			out = append(out, r)
		}
		if len(ms) == 0 && len(out) == 0 {
			return nil, fmt.Errorf("no backups in %s", store)
		}
	} else {
		m, err := listing.Find(id, store.String())
		if err != nil {
			return nil, err
		}
		ms = []backup.Manifest{m}
	}
	key, err := c.BackupKey(keyFile)
	if err != nil {
		return nil, err
	}
	sd, err := scratch.New(c.Dir, "tmp-verify-")
	if err != nil {
		return nil, err
	}
	defer sd.Remove()
	tmp := sd.Path
	for i, m := range ms {
		r := VerifyResult{ID: m.ID, OK: true}
		var err error
		if m.Kind == backup.KindFull {
			err = backup.Fetch(ctx, store, m, key, filepath.Join(tmp, fmt.Sprintf("%d.db", i)))
			_ = os.Remove(filepath.Join(tmp, fmt.Sprintf("%d.db", i)))
		} else {
			err = backup.VerifyDelta(ctx, store, m, key, tmp)
		}
		if err != nil {
			r.OK, r.Error, r.Err = false, err.Error(), err
		}
		c.Progress.Say("%s: %s", m.ID, map[bool]string{true: "ok", false: "FAILED: " + r.Error}[r.OK])
		out = append(out, r)
	}
	if id == "" {
		// The chains: every delta must continue a full backup without a gap.
		for _, m := range ms {
			if m.Kind != backup.KindFull {
				continue
			}
			ch := backup.BuildChain(ms, m)
			if len(ch.GapAfter) > 0 {
				r := VerifyResult{ID: "chain:" + m.ID, Error: fmt.Sprintf("the delta chain after %s stops at revision %d, but %d delta segments start at revision %d: revisions %d to %d are missing",
					m.ID, ch.End, len(ch.GapAfter), ch.GapAfter[0].StartRevision, ch.End+1, ch.GapAfter[0].StartRevision-1)}
				c.Progress.Say("%s: FAILED: %s", r.ID, r.Error)
				out = append(out, r)
			}
		}
	}
	return out, nil
}
