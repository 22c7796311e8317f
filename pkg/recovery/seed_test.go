package recovery

import (
	"slices"
	"testing"

	"github.com/etcd-steward/steward/pkg/datadir"
)

func valid(name string, rev int64, applied, committed uint64) seedCandidate {
	return seedCandidate{Name: name, Finding: datadir.Finding{State: datadir.Valid, Revision: rev}, Indexed: true, Applied: applied, Committed: committed}
}

// TestChooseSeedWALAhead: the seed choice compares what a survivor holds
// once it starts, not its database alone. A survivor killed -9 between
// commit and apply has a database behind the newest backup but a WAL
// whose committed entries may be past it: restoring the backup would
// drop writes it still holds, so its WAL is replayed first and the
// choice made again on the replayed database.
func TestChooseSeedWALAhead(t *testing.T) {
	lost := seedCandidate{Name: "etcd-1", Finding: datadir.Finding{State: datadir.Invalid}}
	for _, tc := range []struct {
		name   string
		cands  []seedCandidate
		newest int64
		replay []int
		seed   int
	}{
		{"database behind, WAL ahead: replayed, not restored over", []seedCandidate{lost, valid("etcd-2", 90, 900, 950), lost}, 100, []int{1}, -1},
		{"database behind, WAL not ahead: the backup", []seedCandidate{lost, valid("etcd-2", 90, 900, 900), lost}, 100, nil, -1},
		{"database not behind: seeds", []seedCandidate{lost, valid("etcd-2", 120, 900, 900), lost}, 100, nil, 1},
		// Between two survivors the one whose database is newer may hold
		// less than the other once it replays its WAL.
		{"the newer database beside a WAL ahead: both compared after the replay", []seedCandidate{valid("etcd-1", 130, 1000, 1000), valid("etcd-2", 110, 900, 1100), lost}, 100, []int{1}, -1},
		// After the replay (applied = committed) the revision decides.
		{"replayed past the backup", []seedCandidate{lost, valid("etcd-2", 140, 950, 950), lost}, 100, nil, 1},
		{"replayed, still behind the backup", []seedCandidate{lost, valid("etcd-2", 95, 950, 950), lost}, 100, nil, -1},
		{"highest revision of several", []seedCandidate{valid("etcd-1", 130, 1000, 1000), valid("etcd-2", 150, 1100, 1100), lost}, 100, nil, 1},
		// Indexes that do not read: the database alone, as before.
		{"indexes unread", []seedCandidate{lost, {Name: "etcd-2", Finding: datadir.Finding{State: datadir.Valid, Revision: 120}}, lost}, 100, nil, 1},
		{"an invalid data dir is never replayed", []seedCandidate{{Name: "etcd-1", Finding: datadir.Finding{State: datadir.Invalid}, Indexed: true, Applied: 1, Committed: 5}, lost, lost}, 100, nil, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := chooseSeed(tc.cands, tc.newest)
			if !slices.Equal(got.Replay, tc.replay) || (len(tc.replay) == 0 && got.Seed != tc.seed) {
				t.Errorf("chooseSeed = %+v; want replay %v, seed %d", got, tc.replay, tc.seed)
			}
		})
	}
}
