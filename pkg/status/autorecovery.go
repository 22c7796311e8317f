package status

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/recoverycount"
)

// AutoRecoveryStateFile is the file, under DIR/status, in which the
// automatic recovery of a directory (pkg/recovery.RunAuto) records its
// latest decision and its latest action, each with its reason. `steward
// status` shows them in the Ready condition's message and under
// autoRecovery. Written atomically by the one RunAuto of the directory.
const AutoRecoveryStateFile = "autorecovery.json"

// AutoRecoveryState is what AutoRecoveryStateFile holds. Its JSON field
// names are stable (`steward status -o json`, autoRecovery).
type AutoRecoveryState struct {
	// Decision is the latest round's: "none" (quorate), "wait" (quorum
	// lost, but not proven lost everywhere, or within the grace period),
	// "act" or "resume".
	Decision  string    `json:"decision"`
	Reason    string    `json:"reason"`
	DecidedAt time.Time `json:"decidedAt"`
	// LostSince is when this loop first saw quorum lost (zero while
	// quorate).
	LostSince time.Time `json:"lostSince,omitzero"`
	// LastAction is the latest recovery this loop ran, if any.
	LastAction *AutoRecoveryAction `json:"lastAction,omitempty"`
	// Actions counts the recoveries this directory's automatic recovery
	// finished, by action, reason and result, since the file was first
	// written (CountAction). Exported as steward_recovery_actions_total:
	// by this directory's agent when it has one (read from this file, the
	// counter never goes backwards across restarts, and it counts
	// whichever process of the directory acted: its agent, or the `certs
	// renew --watch` process of a coordinator that runs none), and on a
	// multi-host cluster by every host's agent, to which the coordinator
	// pushes them (recoverycount.Counts).
	Actions []AutoRecoveryCount `json:"actions,omitempty"`
	// Recorder identifies this directory's counts (16 random hex digits,
	// set once by EnsureRecorder): the `recorder` label of
	// steward_recovery_actions_total. A coordinator that took over, or a
	// state file started anew, counts under a new one, so no exported
	// counter goes backwards.
	Recorder string `json:"recorder,omitempty"`
}

// AutoRecoveryCount is how many recoveries ended with Action and Result,
// started for Reason (recoverycount.Count: the same counts are pushed
// to the hosts' agents).
type AutoRecoveryCount = recoverycount.Count

// Reasons an automatic recovery runs for (AutoRecoveryCount.Reason, the
// `reason` label of steward_recovery_actions_total); the full reason, with
// the members and their states, is AutoRecoveryAction.Reason.
const (
	// ReasonQuorumLost: quorum was lost for the whole grace period (on
	// several hosts: proven lost everywhere by the agents' reports).
	ReasonQuorumLost = "quorum-lost"
	// ReasonUnfinished: an interrupted recovery is recorded in the
	// journal and is resumed.
	ReasonUnfinished = "unfinished-recovery"
)

// CountAction adds one finished recovery of action (recovery.Report's
// Action; "none" when empty) run for reason (Reason*) with result
// ("success", "failure") to s.Actions.
func (s *AutoRecoveryState) CountAction(action, reason, result string) {
	if action == "" {
		action = "none"
	}
	for i := range s.Actions {
		if a := s.Actions[i]; a.Action == action && a.Reason == reason && a.Result == result {
			s.Actions[i].Count++
			return
		}
	}
	s.Actions = append(s.Actions, AutoRecoveryCount{Action: action, Reason: reason, Result: result, Count: 1})
}

// EnsureRecorder gives s its Recorder when it has none; it reports whether
// it did (s then needs writing).
func (s *AutoRecoveryState) EnsureRecorder() bool {
	if s.Recorder != "" {
		return false
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	s.Recorder = hex.EncodeToString(b)
	return true
}

// Counts are s's counts as pushed to the hosts' agents; ok is false while
// s has no Recorder.
func (s *AutoRecoveryState) Counts() (rc recoverycount.Counts, ok bool) {
	if s == nil || s.Recorder == "" {
		return rc, false
	}
	return recoverycount.Counts{Recorder: s.Recorder, Actions: append([]AutoRecoveryCount{}, s.Actions...)}, true
}

// AutoRecoveryAction is one recovery RunAuto ran.
type AutoRecoveryAction struct {
	// Action is recovery.Report.Action (restart, reseed, restore, resume,
	// none).
	Action   string    `json:"action"`
	Reason   string    `json:"reason"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	// Result is "running", "success" or "failure"; Error, the failure.
	Result  string `json:"result"`
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
}

// AutoRecoveryStatePath is the state file of directory dir.
func AutoRecoveryStatePath(dir string) string {
	return filepath.Join(dir, "status", AutoRecoveryStateFile)
}

// ReadAutoRecovery returns the recorded state, nil when there is none.
func ReadAutoRecovery(dir string) (*AutoRecoveryState, error) {
	b, err := os.ReadFile(AutoRecoveryStatePath(dir))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s AutoRecoveryState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", AutoRecoveryStatePath(dir), err)
	}
	// A count is exported as a counter: a damaged one is refused, never
	// shown as a counter that went backwards.
	for _, a := range s.Actions {
		if a.Count < 0 || a.Action == "" || a.Result == "" {
			return nil, fmt.Errorf("%s: action count %+v: want an action, a result and a count of 0 or more (the file is damaged; move it aside, the next round writes a new one)", AutoRecoveryStatePath(dir), a)
		}
	}
	if s.Recorder != "" {
		if err := (recoverycount.Counts{Recorder: s.Recorder, Actions: s.Actions}).Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w (the file is damaged; move it aside, the next round writes a new one)", AutoRecoveryStatePath(dir), err)
		}
	}
	return &s, nil
}

// WriteAutoRecovery records s atomically (0600, in a 0700 directory).
func WriteAutoRecovery(dir string, s *AutoRecoveryState) error {
	if err := os.MkdirAll(filepath.Join(dir, "status"), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(AutoRecoveryStatePath(dir), append(b, '\n'), 0o600)
}

// autoRecoveryNote is what the Ready condition's message adds: the latest
// decision while quorum is lost, and the latest action.
func (s *AutoRecoveryState) note(quorate bool) string {
	if s == nil {
		return ""
	}
	out := ""
	if !quorate && s.Decision != "" && s.Decision != "none" {
		out = fmt.Sprintf("; automatic recovery (%s at %s): %s", s.Decision, s.DecidedAt.UTC().Format(time.RFC3339), s.Reason)
	}
	if a := s.LastAction; a != nil {
		out += fmt.Sprintf("; last automatic recovery: %s, %s, started %s (%s)", a.Action, a.Result, a.Started.UTC().Format(time.RFC3339), a.Reason)
		if a.Error != "" {
			out += ": " + a.Error
		}
	}
	return out
}
