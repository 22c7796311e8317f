package harness

import (
	"testing"

	"github.com/etcd-steward/steward/pkg/status"
)

// TestCheckRecoveryPath: every correct way through a quorum loss passes
// (the shortest, a failure then the resume, a failure then the same
// action again, after earlier counts); a wrong one does not.
func TestCheckRecoveryPath(t *testing.T) {
	earlier := map[string]int64{"reseed/quorum-lost/success": 1}
	with := func(m map[string]int64) map[string]int64 {
		out := map[string]int64{}
		for k, v := range earlier {
			out[k] = v
		}
		for k, v := range m {
			out[k] += v
		}
		return out
	}
	last := func(action, result string) *status.AutoRecoveryAction {
		return &status.AutoRecoveryAction{Action: action, Result: result}
	}
	for _, tc := range []struct {
		name  string
		after map[string]int64
		last  *status.AutoRecoveryAction
		ok    bool
	}{
		{"the shortest", with(map[string]int64{"restore/quorum-lost/success": 1}), last("restore", "success"), true},
		{"a restore failed, resumed", with(map[string]int64{"restore/quorum-lost/failure": 1, "resume/unfinished-recovery/success": 1}), last("resume", "success"), true},
		{"a restore failed, then another", with(map[string]int64{"restore/quorum-lost/failure": 1, "restore/quorum-lost/success": 1}), last("restore", "success"), true},
		{"a resume failed too", with(map[string]int64{"restore/quorum-lost/failure": 1, "resume/unfinished-recovery/failure": 1, "resume/unfinished-recovery/success": 1}), last("resume", "success"), true},
		{"nothing", with(nil), nil, false},
		{"two successes", with(map[string]int64{"restore/quorum-lost/success": 2}), last("restore", "success"), false},
		{"only failures", with(map[string]int64{"restore/quorum-lost/failure": 2}), last("restore", "failure"), false},
		{"an action not expected", with(map[string]int64{"restart/quorum-lost/success": 1}), last("restart", "success"), false},
		{"a resume with nothing failed", with(map[string]int64{"resume/unfinished-recovery/success": 1}), last("resume", "success"), false},
		{"a resume under the wrong reason", with(map[string]int64{"restore/quorum-lost/failure": 1, "resume/quorum-lost/success": 1}), last("resume", "success"), false},
		{"the last action is not the success", with(map[string]int64{"restore/quorum-lost/success": 1}), last("restore", "failure"), false},
		{"a count went down", map[string]int64{"restore/quorum-lost/success": 1}, last("restore", "success"), false},
		{"a result not counted", with(map[string]int64{"restore/quorum-lost/waited": 1, "restore/quorum-lost/success": 1}), last("restore", "success"), false},
	} {
		err := CheckRecoveryPath(earlier, tc.after, tc.last, "restore")
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %t", tc.name, err, tc.ok)
		}
	}
}
