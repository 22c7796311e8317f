package restore

import (
	"fmt"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
)

// replaying says what a restore replays from the deltas after full: the
// range up to its target (Options.ToRevision; the chain's end without
// one) and the segments holding it, not the whole chain. With a target
// time the revision it reaches is known only after the replay (replayed).
func replaying(full backup.Manifest, chain backup.Chain, o Options) string {
	from := full.EndRevision + 1
	if !o.ToTime.IsZero() {
		if o.ToRevision > 0 && o.ToRevision < chain.End {
			// A time on a timeline read from its ancestor: bounded by the
			// branch revision too (openStore resolves it).
			return fmt.Sprintf("replaying the delta segments from revision %d up to %s, at most to revision %d (the chain's %d segments reach revision %d)",
				from, o.ToTime.UTC().Format(time.RFC3339), o.ToRevision, len(chain.Deltas), chain.End)
		}
		return fmt.Sprintf("replaying the delta segments from revision %d up to %s (the chain's %d segments reach revision %d)",
			from, o.ToTime.UTC().Format(time.RFC3339), len(chain.Deltas), chain.End)
	}
	to := chain.End
	if o.ToRevision > 0 && o.ToRevision < to {
		to = o.ToRevision
	}
	n := 0
	for _, d := range chain.Deltas {
		if d.StartRevision <= to {
			n++
		}
	}
	if to < from {
		return fmt.Sprintf("replaying nothing: revision %d is the full backup's own", to)
	}
	return fmt.Sprintf("replaying %d delta segments (revisions %d to %d)", n, from, to)
}

// replayed says where a replay to a target time ended ("" without one:
// replaying said it all).
func replayed(full backup.Manifest, reached int64, o Options) string {
	if o.ToTime.IsZero() {
		return ""
	}
	return fmt.Sprintf("replayed revisions %d to %d, the last written at or before %s", full.EndRevision+1, reached, o.ToTime.UTC().Format(time.RFC3339))
}
