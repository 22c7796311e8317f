// Package crashpoint owns named crash points: places where a test makes the process die at once with SIGKILL.
//
// A crash point is armed by the environment variable STEWARD_CRASHPOINT,
// read once per process: a comma-separated list of point names, e.g.
//
//	STEWARD_CRASHPOINT=plan-step-after:3 steward plan resume
//
// When the process reaches an armed point, it writes "crashpoint: NAME" as
// one line to stderr and sends itself SIGKILL: no deferred function runs,
// no lock is released by hand, no file is flushed, as in a crash or a power
// loss of the process. Unarmed, Hit is a map lookup in an empty map.
//
// Names are lowercase words joined by hyphens, AREA-WHAT-WHEN, with an
// argument after a colon where the point repeats (Indexed builds those).
// The points:
//
//   - plan-step-before:N  in the plan engine, after step N is recorded
//     running on disk and before its action runs;
//   - plan-step-after:N   in the plan engine, after step N's action returned
//     without error and before the step is recorded done;
//   - backup-compact-before-manifest  in a delta compaction (pkg/backup),
//     after the new full backup's object is stored, before its manifest;
//   - backup-compact-after-manifest   after that manifest is stored, before
//     it is read back;
//   - replace-built:N  in the replace step of an upgrade or rollback by
//     restore (pkg/upgrade), after the new data dir of the N-th member (from
//     0, in spec order) is built, on its host, before the next is built or
//     the spec names them;
//   - replace-spec-saved  in that replace step, after the spec names every
//     member's new data dir, before the agents are given the new configs;
//   - agent-stage-received  in an agent, after the snapshot of a stage
//     request (a restore, an upgrade by restore) arrived whole (its
//     SHA-256 checked, in a scratch dir), before anything is staged;
//   - agent-stage-staged  in an agent, after it staged a data dir for a
//     stage request, before it answers;
//   - agent-commit-aside  in an agent's commit of a staged data dir, after
//     whatever held the data dir's name was moved aside (nothing, the
//     first time), before the staged dir is put in place;
//   - agent-commit-record  in that commit, after the staged dir's version
//     record is in place, before the staged dir is;
//   - agent-commit-done  in that commit, after the staged dir is in place
//     (durably), before the agent answers;
//   - restore-staged:N  in a restore (pkg/restore), after the data dir of
//     its N-th target member (from 0, in spec order) is staged, before the
//     next is staged or any is committed;
//   - restore-committed:N  in a restore's commit (pkg/restore), after the
//     N-th target member's (from 0, in spec order) restored data dir is in
//     place (on its host), before the next member's or the spec; the
//     marker of an unfinished commit (DIR/status/restore-pending.json)
//     exists then;
//   - recover-reseed-rebuilt  in a recovery's reseed (pkg/recovery), after
//     the seed's data dir was rebuilt from its own database and committed
//     (the spec names the new timeline), before the rebuilt seed runs with
//     --force-new-cluster and the recovery journal records the rebuild.
//
// N is the step's index, as `steward plan show` lists it (for a plan's
// points).
package crashpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnvVar is the environment variable that arms crash points.
const EnvVar = "STEWARD_CRASHPOINT"

// Points with an index: the full name is Indexed(point, i).
const (
	// PlanStepBefore is hit after a step is recorded running, before it acts.
	PlanStepBefore = "plan-step-before"
	// PlanStepAfter is hit after a step acted without error, before it is
	// recorded done.
	PlanStepAfter = "plan-step-after"
	// RestoreStaged is hit in a restore after a member's data dir is
	// staged, before the next member's is staged or any is committed.
	RestoreStaged = "restore-staged"
	// RestoreCommitted is hit in a restore's commit after a member's
	// restored data dir is put in place, before the next member's.
	RestoreCommitted = "restore-committed"
	// ReplaceBuilt is hit in an upgrade or rollback by restore after a
	// member's new data dir is built (on its host), before the next is.
	ReplaceBuilt = "replace-built"
)

// ReplaceSpecSaved is hit in an upgrade or rollback by restore after the
// spec names every member's new data dir, before the members' runtimes
// (their hosts' agents) are given the new configs.
const ReplaceSpecSaved = "replace-spec-saved"

// The points of an agent (pkg/agent) on the stage and commit requests of
// a restore or an upgrade or rollback by restore, in the order they are
// hit: armed in the agent's environment.
const (
	// AgentStageReceived is hit after the snapshot of a stage request
	// arrived whole and matched its SHA-256, before anything is staged.
	AgentStageReceived = "agent-stage-received"
	// AgentStageStaged is hit after the agent staged a data dir for a
	// stage request (and wrote its version record), before it answers.
	AgentStageStaged = "agent-stage-staged"
	// AgentCommitAside is hit in a commit after whatever held the data
	// dir's name was moved aside, before the staged dir is put in place.
	AgentCommitAside = "agent-commit-aside"
	// AgentCommitRecord is hit in a commit after the staged dir's version
	// record is in place, before the staged dir is.
	AgentCommitRecord = "agent-commit-record"
	// AgentCommitDone is hit after a commit put the staged dir in place
	// (synced), before the agent answers.
	AgentCommitDone = "agent-commit-done"
)

// AgentPoints are the agent's points, in the order a stage and a commit
// hit them.
var AgentPoints = []string{AgentStageReceived, AgentStageStaged, AgentCommitAside, AgentCommitRecord, AgentCommitDone}

// RecoverReseedRebuilt is hit in a recovery's reseed after the seed's
// rebuilt data dir is committed, before the journal records it.
const RecoverReseedRebuilt = "recover-reseed-rebuilt"

// Indexed returns the name of a repeating point's i-th instance: "POINT:I".
func Indexed(point string, i int) string { return point + ":" + strconv.Itoa(i) }

// armed is the set of armed points, parsed from EnvVar on first use.
var armed = sync.OnceValue(func() map[string]bool { return parse(os.Getenv(EnvVar)) })

// parse splits a comma-separated list of names; blanks are ignored.
func parse(v string) map[string]bool {
	set := map[string]bool{}
	for n := range strings.SplitSeq(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			set[n] = true
		}
	}
	return set
}

// Hit kills the process with SIGKILL when STEWARD_CRASHPOINT names this
// point, after writing "crashpoint: NAME" to stderr; else it returns.
func Hit(name string) {
	if !armed()[name] {
		return
	}
	fmt.Fprintf(os.Stderr, "crashpoint: %s\n", name)
	if err := syscall.Kill(os.Getpid(), syscall.SIGKILL); err != nil {
		panic(fmt.Sprintf("crashpoint %s: kill: %v", name, err))
	}
	for { // SIGKILL is on its way: never go on past an armed point
		time.Sleep(time.Second)
	}
}
