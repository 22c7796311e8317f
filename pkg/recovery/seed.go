package recovery

import (
	"context"
	"fmt"
	"strings"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/spec"
)

// seedCandidate is what the seed choice knows of one member's stopped
// data dir: its finding (the database's revision) and, when they read,
// the raft indexes datadir.Applied gives (the database's applied index
// and its WAL's committed one).
type seedCandidate struct {
	Name    string
	Finding datadir.Finding
	// Indexed: Applied and Committed were read.
	Indexed            bool
	Applied, Committed uint64
}

// walAhead reports whether the member's WAL committed entries its
// database has not applied (a member killed between commit and apply):
// its database's revision then understates what it holds, since etcd
// applies those entries when it starts.
func (s seedCandidate) walAhead() bool {
	return s.Finding.State == datadir.Valid && s.Indexed && s.Committed > s.Applied
}

// seedChoice is chooseSeed's answer: replay the WALs of Replay first (and
// choose again), else seed from Seed (an index of the candidates), else
// (Seed < 0) restore the newest backup.
type seedChoice struct {
	Replay []int
	Seed   int
}

// chooseSeed is the choice between a survivor's own data and the newest
// backup (newest: its end revision) once no majority has valid data.
//
// Invariant: the choice compares what each survivor holds once it starts
// (its committed position), never its database alone. A member killed -9
// between commit and apply holds committed entries in its WAL only: its
// database's revision may be behind the newest backup while what it
// replays is past it, and restoring the backup would then drop writes
// the survivor still holds (and choosing between survivors by their
// databases could drop the writes of the one whose WAL is ahead). A
// revision cannot be read from the WAL (how far a transaction or a
// delete moves it depends on the keyspace), so every valid member whose
// WAL is ahead is replayed first (Replay: the caller runs it alone until
// its database applied every committed entry, then reads its data dir
// again and chooses again); with no WAL ahead, a database's revision is
// its committed position, and the survivor with the highest one not
// behind the newest backup seeds the cluster (it holds every write the
// backup holds, a member applying only committed entries in the one
// order raft gives, and maybe later ones). None: the backup is restored.
func chooseSeed(cands []seedCandidate, newest int64) seedChoice {
	var replay []int
	for i, s := range cands {
		if s.walAhead() {
			replay = append(replay, i)
		}
	}
	if len(replay) > 0 {
		return seedChoice{Replay: replay, Seed: -1}
	}
	best := -1
	for i, s := range cands {
		f := s.Finding
		if f.State == datadir.Valid && f.Revision >= newest && (best < 0 || f.Revision > cands[best].Finding.Revision) {
			best = i
		}
	}
	return seedChoice{Seed: best}
}

// seedCandidates reads the raft indexes of every valid data dir among
// findings (one per member of the spec, in its order). A member whose
// indexes do not read is judged by its database alone (as a member
// whose WAL is not ahead), and said so.
func seedCandidates(ctx context.Context, c *cluster.Cluster, findings []datadir.Finding) []seedCandidate {
	out := make([]seedCandidate, len(findings))
	for i, m := range c.Spec.Members {
		out[i] = seedCandidate{Name: m.Name, Finding: findings[i]}
		if findings[i].State != datadir.Valid {
			continue
		}
		ai, err := appliedIndex(ctx, c, m)
		if err != nil {
			c.Progress.Say("  %s: its WAL's committed index does not read (%v): judged by its database's revision alone", m.Name, err)
			continue
		}
		out[i].Indexed, out[i].Applied, out[i].Committed = true, ai.Applied, ai.Committed
	}
	return out
}

// appliedIndex reads stopped member m's applied and committed index, on
// this machine or through its agent.
func appliedIndex(ctx context.Context, c *cluster.Cluster, m spec.Member) (memberrt.AppliedIndex, error) {
	if c.OnOtherHost(m) {
		rt, err := c.RuntimeFor(m)
		if err != nil {
			return memberrt.AppliedIndex{}, err
		}
		ai, err := rt.Applied(ctx, m.Name)
		if err != nil {
			return ai, fmt.Errorf("on host %s: %w", m.Agent, err)
		}
		return ai, nil
	}
	var ai memberrt.AppliedIndex
	var err error
	ai.Applied, ai.Committed, err = datadir.Applied(spec.Path(c.Dir, m.DataDir))
	return ai, err
}

func replayNames(cands []seedCandidate, idx []int) string {
	var out []string
	for _, i := range idx {
		s := cands[i]
		out = append(out, fmt.Sprintf("%s (database at revision %d, applied index %d, WAL committed %d)", s.Name, s.Finding.Revision, s.Applied, s.Committed))
	}
	return strings.Join(out, ", ")
}
