package harness

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/etcd-steward/steward/pkg/status"
)

// RecoveryCounts is the automatic recoveries a directory counted
// (status.AutoRecoveryState.Actions, what steward_recovery_actions_total
// exports), by "action/reason/result"; empty for no state.
func RecoveryCounts(st *status.AutoRecoveryState) map[string]int64 {
	out := map[string]int64{}
	if st != nil {
		for _, a := range st.Actions {
			out[a.Action+"/"+a.Reason+"/"+a.Result] += a.Count
		}
	}
	return out
}

// CheckRecoveryPath says whether the recoveries counted between before and
// after (RecoveryCounts) are a correct way through one loss of quorum, of
// which last (the state's LastAction) is the end: every path the automatic
// recovery may take under load, not only the shortest. Correct is: counts
// that only grow; exactly one success; the actions taken among actions
// (the first, quorum lost) and "resume" (an unfinished recovery, after a
// failure); each counted under its reason (quorum-lost; resume:
// unfinished-recovery); a resume's success only after a failure; results
// success or failure (a wait is not counted); and last is that success.
func CheckRecoveryPath(before, after map[string]int64, last *status.AutoRecoveryAction, actions ...string) error {
	var successes, failures []string
	keys := maps.Clone(after)
	maps.Copy(keys, before)
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		n := after[k] - before[k]
		if n < 0 {
			return fmt.Errorf("count %s went down: %d, was %d", k, after[k], before[k])
		}
		if n == 0 {
			continue
		}
		parts := strings.Split(k, "/")
		if len(parts) != 3 {
			return fmt.Errorf("count %q is not action/reason/result", k)
		}
		action, reason, result := parts[0], parts[1], parts[2]
		switch {
		case action == "resume" && reason != status.ReasonUnfinished,
			action != "resume" && reason != status.ReasonQuorumLost:
			return fmt.Errorf("%s counted %d: a %s under reason %s", k, n, action, reason)
		case action != "resume" && !slices.Contains(actions, action):
			return fmt.Errorf("%s counted %d: action %s, want one of %v or resume", k, n, action, actions)
		}
		switch result {
		case "success":
			for range n {
				successes = append(successes, action)
			}
		case "failure":
			for range n {
				failures = append(failures, action)
			}
		default:
			return fmt.Errorf("%s counted %d: result %s", k, n, result)
		}
	}
	switch {
	case len(successes) != 1:
		return fmt.Errorf("%d successes (%v; failures %v), want exactly one", len(successes), successes, failures)
	case successes[0] == "resume" && len(failures) == 0:
		return fmt.Errorf("a resume succeeded, but no recovery failed before it")
	case last == nil || last.Action != successes[0] || last.Result != "success":
		return fmt.Errorf("last action %+v, want the %s that succeeded", last, successes[0])
	}
	return nil
}
