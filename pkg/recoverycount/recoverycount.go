package recoverycount

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"github.com/etcd-steward/steward/internal/atomicfile"
)

// The automatic recovery's counts, handed to every host's agent.
//
// On a multi-host cluster the coordinator's directory runs the automatic
// recovery and counts each action in its DIR/status/autorecovery.json
// (pkg/status.AutoRecoveryState). A coordinator with no member of its own
// runs no agent and serves no metrics, so it pushes the counts to every
// host's agent (PUT /v1/recovery-counts) after each recorded action and
// again until each agent has acknowledged them; each agent keeps them in
// its DIR/status/recovery-counts.json and exports them as
// steward_recovery_actions_total, labelled by the recording directory
// (Recorder). Invariants, enforced here:
//
//   - A count never goes backwards on an agent: Merge keeps,
//     per recorder and per action, reason and result, the larger of what
//     it holds and what arrives. Each recorder's counts only grow, so a
//     push that arrives late (after a newer one) or twice changes nothing,
//     and the merged counts are those of the newest push.
//   - Each recording directory is its own series (Recorder, a random ID
//     the directory's state file keeps): a coordinator that took over
//     counts from 0 under its own ID, and the old one's counts stay.
//   - What arrives is checked before anything is kept (Validate): only
//     short lower-case words as label values, counts of 0 or more, a
//     bounded number of each; nothing else is stored or exported.

// File is the file, under an agent's DIR/status, holding
// the counts its coordinator pushed.
const File = "recovery-counts.json"

// Bounds of what an agent keeps.
const (
	// MaxEntries bounds the counts of one recorder.
	MaxEntries = 64
	// MaxRecorders bounds the recording directories an agent keeps
	// counts of (one per coordinator that ever acted: a takeover adds
	// one).
	MaxRecorders = 32
)

// Count is how many automatic recoveries ended with Action and
// Result, started for Reason. Its JSON field names are stable (`steward
// status -o json`, autoRecovery.actions).
type Count struct {
	Action string `json:"action"`
	// Reason is why the recovery ran, as a short code (status.Reason*):
	// "quorum-lost", "unfinished-recovery"; empty in counts recorded
	// before the field existed.
	Reason string `json:"reason,omitempty"`
	Result string `json:"result"`
	Count  int64  `json:"count"`
}

// Counts are one recording directory's counts.
type Counts struct {
	// Recorder identifies the directory that recorded the counts (its
	// state file's random ID: 16 hex digits).
	Recorder string  `json:"recorder"`
	Actions  []Count `json:"actions"`
}

// Received is what File holds.
type Received struct {
	Recorders []Counts `json:"recorders"`
}

var (
	recorderRE = regexp.MustCompile(`^[0-9a-f]{16}$`)
	labelRE    = regexp.MustCompile(`^[a-z][a-z-]{0,31}$`)
)

// ValidRecorder checks a recorder ID.
func ValidRecorder(id string) error {
	if !recorderRE.MatchString(id) {
		return fmt.Errorf("recorder %q: want 16 lower-case hex digits", id)
	}
	return nil
}

// Validate checks counts that arrived (a push, or the file): a valid
// recorder, at most MaxEntries counts, each an action and a
// result (and a reason, when given) of lower-case letters and dashes (at
// most 32), a count of 0 or more, no two for the same action, reason and
// result.
func (rc Counts) Validate() error {
	if err := ValidRecorder(rc.Recorder); err != nil {
		return err
	}
	if len(rc.Actions) > MaxEntries {
		return fmt.Errorf("recorder %s: %d counts, at most %d", rc.Recorder, len(rc.Actions), MaxEntries)
	}
	seen := map[Count]bool{}
	for _, a := range rc.Actions {
		if !labelRE.MatchString(a.Action) || !labelRE.MatchString(a.Result) || (a.Reason != "" && !labelRE.MatchString(a.Reason)) {
			return fmt.Errorf("recorder %s: count %+v: want an action, a result and a reason of lower-case letters and dashes (at most 32)", rc.Recorder, a)
		}
		if a.Count < 0 {
			return fmt.Errorf("recorder %s: count %+v: want a count of 0 or more", rc.Recorder, a)
		}
		k := Count{Action: a.Action, Reason: a.Reason, Result: a.Result}
		if seen[k] {
			return fmt.Errorf("recorder %s: %s/%s/%s counted twice", rc.Recorder, a.Action, a.Reason, a.Result)
		}
		seen[k] = true
	}
	return nil
}

// Merge merges the counts in into have (neither changed):
// in's recorder added when new, and each of its counts raised to in's
// when in's is larger (a count never goes backwards: a late or repeated
// push changes nothing). changed reports whether anything did. A new
// recorder beyond MaxRecorders is refused. The result is sorted by
// recorder, and each recorder's counts by action, reason, result.
func Merge(have []Counts, in Counts) (out []Counts, changed bool, err error) {
	if err := in.Validate(); err != nil {
		return nil, false, err
	}
	out = make([]Counts, 0, len(have)+1)
	found := false
	for _, h := range have {
		h = Counts{Recorder: h.Recorder, Actions: slices.Clone(h.Actions)}
		if h.Recorder == in.Recorder {
			found = true
			for _, a := range in.Actions {
				i := slices.IndexFunc(h.Actions, func(x Count) bool {
					return x.Action == a.Action && x.Reason == a.Reason && x.Result == a.Result
				})
				switch {
				case i < 0:
					h.Actions = append(h.Actions, a)
					changed = true
				case a.Count > h.Actions[i].Count:
					h.Actions[i].Count = a.Count
					changed = true
				}
			}
			if len(h.Actions) > MaxEntries {
				return nil, false, fmt.Errorf("recorder %s: %d counts merged, at most %d", in.Recorder, len(h.Actions), MaxEntries)
			}
		}
		out = append(out, h)
	}
	if !found {
		if len(have) >= MaxRecorders {
			return nil, false, fmt.Errorf("counts of recorder %s refused: this agent keeps the counts of %d recorders already, at most %d", in.Recorder, len(have), MaxRecorders)
		}
		out = append(out, Counts{Recorder: in.Recorder, Actions: slices.Clone(in.Actions)})
		changed = true
	}
	for i := range out {
		sortCounts(out[i].Actions)
	}
	slices.SortFunc(out, func(a, b Counts) int {
		switch {
		case a.Recorder < b.Recorder:
			return -1
		case a.Recorder > b.Recorder:
			return 1
		}
		return 0
	})
	return out, changed, nil
}

func sortCounts(c []Count) {
	slices.SortFunc(c, func(a, b Count) int {
		for _, p := range [][2]string{{a.Action, b.Action}, {a.Reason, b.Reason}, {a.Result, b.Result}} {
			if p[0] < p[1] {
				return -1
			}
			if p[0] > p[1] {
				return 1
			}
		}
		return 0
	})
}

// Path is the received counts' file of directory dir.
func Path(dir string) string {
	return filepath.Join(dir, "status", File)
}

// Parse parses File's content: every
// recorder valid (Validate), none twice, at most MaxRecorders. A damaged
// file is an error, never read as counts of 0 (that would be a counter
// going backwards).
func Parse(b []byte) (*Received, error) {
	var r Received
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	if len(r.Recorders) > MaxRecorders {
		return nil, fmt.Errorf("%d recorders, at most %d", len(r.Recorders), MaxRecorders)
	}
	seen := map[string]bool{}
	for _, rc := range r.Recorders {
		if err := rc.Validate(); err != nil {
			return nil, err
		}
		if seen[rc.Recorder] {
			return nil, fmt.Errorf("recorder %s twice", rc.Recorder)
		}
		seen[rc.Recorder] = true
	}
	return &r, nil
}

// Read reads dir's File; nil when
// there is none.
func Read(dir string) (*Received, error) {
	b, err := os.ReadFile(Path(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (the file is damaged; move it aside, the coordinator pushes its counts again within minutes)", Path(dir), err)
	}
	return r, nil
}

// Write records r atomically (0600, in a 0700
// directory).
func Write(dir string, r *Received) error {
	if err := os.MkdirAll(filepath.Join(dir, "status"), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(Path(dir), append(b, '\n'), 0o600)
}
