package restore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/spec"
)

// ErrBackupTooNew: the backup's database was written by an etcd more than
// one minor newer than the one the restored members run (its storage
// version): etcd lowers a storage version one minor at a time, so no
// member would start on it. No option overrides it; the message names an
// older backup, or the spec's version must be raised.
var ErrBackupTooNew = errors.New("backup of a newer etcd")

// lowerStorageVersion makes the prepared snapshot one the targets' etcd
// starts on: a backup taken by the next minor (the one a rollback left,
// say: 3.7's snapshot before its downgrade to 3.6) gets its storage and
// cluster versions lowered as etcd's own downgrade lowers them
// (backup.LowerStorageVersion); no acknowledged write is lost. Two minors
// or more is refused before anything outside the temporary dir changes.
// The targets' etcd is the oldest any of them runs.
func lowerStorageVersion(c *cluster.Cluster, p prepared, targets []spec.Member, src source) error {
	target := ""
	for _, m := range targets {
		if v := c.Spec.VersionOf(m); target == "" || versionLess(v, target) {
			target = v
		}
	}
	sv, err := backup.LowerStorageVersion(p.snapshot, target)
	if errors.Is(err, backup.ErrStorageTooNew) {
		return refusal.New(ErrBackupTooNew, "refusing to restore %s: %v, so etcd %s (the restored members' version) cannot start on it: %s",
			p.from, err, target, olderSource(src, target))
	}
	if err != nil {
		return err
	}
	if sv.Lowered {
		to := sv.To
		if to == "" {
			to = "none (as etcd 3.5 writes)"
		}
		c.Progress.Say("%s has storage version %s, one minor newer than etcd %s: lowered it to %s as etcd's downgrade does (no write is lost)",
			p.from, sv.From, target, to)
	}
	return nil
}

// olderSource says what a restore into etcd target can use instead: the
// newest full backup in the store an etcd at most one minor newer took,
// on the timeline of the backup refused (one of another timeline would
// restore another history).
func olderSource(src source, target string) string {
	tmaj, tmin := minorOf(target)
	s, ok := src.(*storeSource)
	if ok {
		for i := len(s.listing.Backups) - 1; i >= 0; i-- {
			m := s.listing.Backups[i]
			if m.TimelineID() != s.full.TimelineID() {
				continue
			}
			if maj, mi := minorOf(m.EtcdVersion); m.Kind == backup.KindFull && m.ID != s.full.ID && maj == tmaj && mi >= 0 && mi <= tmin+1 {
				return fmt.Sprintf("restore backup %s instead (taken by etcd %s, the newest full backup %d.%d can start on; the deltas after it are replayed as usual), or run the restored members on etcd %d.%d or later",
					m.ID, m.EtcdVersion, tmaj, tmin, tmaj, tmin+1)
			}
		}
	}
	return fmt.Sprintf("restore a backup or snapshot taken by etcd %d.%d or %d.%d, or run the restored members on etcd %d.%d or later",
		tmaj, tmin, tmaj, tmin+1, tmaj, tmin+1)
}

// minorOf returns the major and minor of "3.6.16" (-1, -1 for no version).
func minorOf(v string) (int, int) {
	p := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(p) < 2 {
		return -1, -1
	}
	maj, err1 := strconv.Atoi(p[0])
	mi, err2 := strconv.Atoi(p[1])
	if err1 != nil || err2 != nil {
		return -1, -1
	}
	return maj, mi
}

// versionLess orders etcd versions by major and minor.
func versionLess(a, b string) bool {
	am, ai := minorOf(a)
	bm, bi := minorOf(b)
	return am < bm || am == bm && ai < bi
}
