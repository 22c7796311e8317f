package recoverycount

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

func counts(id string, cs ...Count) Counts {
	return Counts{Recorder: id, Actions: cs}
}

func rcount(action, reason, result string, n int64) Count {
	return Count{Action: action, Reason: reason, Result: result, Count: n}
}

const (
	recA = "00000000000000aa"
	recB = "00000000000000bb"
)

// TestMergeRecoveryCounts: the pushes of one recorder merge to the newest
// counts whatever their order (a late push, one delivered twice, one that
// overtook another), a count never goes down, a count absent from a push
// is kept, another recorder is kept apart, and nothing of what was held
// changes in place.
func TestMergeRecoveryCounts(t *testing.T) {
	p1 := counts(recA, rcount("reseed", "quorum-lost", "success", 1))
	p2 := counts(recA, rcount("reseed", "quorum-lost", "success", 1), rcount("restore", "quorum-lost", "failure", 1))
	p3 := counts(recA, rcount("reseed", "quorum-lost", "success", 2), rcount("restore", "quorum-lost", "failure", 1))
	want := fmt.Sprint([]Counts{counts(recA, rcount("reseed", "quorum-lost", "success", 2), rcount("restore", "quorum-lost", "failure", 1))})
	for _, order := range [][]Counts{{p1, p2, p3}, {p3, p2, p1}, {p2, p3, p1, p3}, {p3, p3}, {p1, p3, p1}} {
		var have []Counts
		for _, p := range order {
			var err error
			if have, _, err = Merge(have, p); err != nil {
				t.Fatal(err)
			}
		}
		if fmt.Sprint(have) != want {
			t.Errorf("order %v: %v, want %v", order, have, want)
		}
	}
	have, changed, err := Merge(nil, p3)
	if err != nil || !changed {
		t.Fatalf("first push: %v %v", changed, err)
	}
	before := fmt.Sprint(have)
	// Late and repeated pushes change nothing, and say so.
	for _, p := range []Counts{p1, p2, p3, counts(recA)} {
		out, changed, err := Merge(have, p)
		if err != nil || changed || fmt.Sprint(out) != before {
			t.Errorf("push %v after the newest: %v changed=%v %v", p, out, changed, err)
		}
	}
	// Another recorder (a coordinator that took over) is kept apart.
	out, changed, err := Merge(have, counts(recB, rcount("resume", "unfinished-recovery", "success", 1)))
	if err != nil || !changed || len(out) != 2 || out[0].Recorder != recA || out[1].Recorder != recB || fmt.Sprint(out[0]) != fmt.Sprint(have[0]) {
		t.Errorf("a second recorder: %v changed=%v %v", out, changed, err)
	}
	if fmt.Sprint(have) != before {
		t.Errorf("the merge changed what was held: %v, was %s", have, before)
	}
}

// TestRecoveryCountsRefused: what does not validate is refused naming the
// problem, and the merge returns nothing: a bad recorder, label values
// that are not short lower-case words, a negative count, a count twice,
// too many counts, one recorder too many.
func TestRecoveryCountsRefused(t *testing.T) {
	many := counts(recA)
	for i := range MaxEntries + 1 {
		many.Actions = append(many.Actions, rcount("reseed", fmt.Sprintf("r-%c", 'a'+i%26)+strings.Repeat("x", i/26), "success", 1))
	}
	for _, c := range []struct {
		rc   Counts
		want string
	}{
		{counts("../../etc"), "16 lower-case hex digits"},
		{counts(strings.ToUpper(recA)), "16 lower-case hex digits"},
		{counts(recA, rcount("re\"seed", "", "success", 1)), "lower-case letters and dashes"},
		{counts(recA, rcount("reseed", "Quorum", "success", 1)), "lower-case letters and dashes"},
		{counts(recA, rcount("reseed", "", "", 1)), "lower-case letters and dashes"},
		{counts(recA, rcount("reseed", "", strings.Repeat("s", 33), 1)), "lower-case letters and dashes"},
		{counts(recA, rcount("reseed", "", "success", -1)), "count of 0 or more"},
		{counts(recA, rcount("reseed", "", "success", 1), rcount("reseed", "", "success", 2)), "counted twice"},
		{many, "at most 64"},
	} {
		if err := c.rc.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.rc, err, c.want)
		}
		if out, changed, err := Merge(nil, c.rc); err == nil || out != nil || changed {
			t.Errorf("merge of %v: %v %v %v", c.rc, out, changed, err)
		}
	}
	var full []Counts
	for i := range MaxRecorders {
		full = append(full, counts(fmt.Sprintf("%016x", i)))
	}
	if _, _, err := Merge(full, counts(recB)); err == nil || !strings.Contains(err.Error(), "at most 32") {
		t.Errorf("recorder %d: %v", MaxRecorders+1, err)
	}
	if _, changed, err := Merge(full, counts(fmt.Sprintf("%016x", 3), rcount("reseed", "", "success", 1))); err != nil || !changed {
		t.Errorf("a known recorder with all %d kept: %v %v", MaxRecorders, changed, err)
	}
}

// TestReceivedRecoveryCountsFile: the file round-trips (0600), a missing
// one is nil, a damaged one is an error naming the file.
func TestReceivedRecoveryCountsFile(t *testing.T) {
	dir := t.TempDir()
	if r, err := Read(dir); r != nil || err != nil {
		t.Fatalf("no file: %v %v", r, err)
	}
	in := &Received{Recorders: []Counts{counts(recA, rcount("reseed", "quorum-lost", "success", 1))}}
	if err := Write(dir, in); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(Path(dir)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode: %v %v", fi, err)
	}
	r, err := Read(dir)
	if err != nil || fmt.Sprint(r) != fmt.Sprint(in) {
		t.Errorf("read back %v %v, want %v", r, err, in)
	}
	for _, bad := range []string{"{", `{"recorders":[{"recorder":"x","actions":[]}]}`,
		`{"recorders":[{"recorder":"00000000000000aa","actions":[]},{"recorder":"00000000000000aa","actions":[]}]}`} {
		if err := os.WriteFile(Path(dir), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if r, err := Read(dir); r != nil || err == nil || !strings.Contains(err.Error(), Path(dir)) {
			t.Errorf("%s: %v %v", bad, r, err)
		}
	}
}

// FuzzReceivedRecoveryCounts: the received counts' file (what an agent
// read from disk) never panics the parser; what parses validates, merges
// into itself without a change, and round-trips through JSON.
func FuzzReceivedRecoveryCounts(f *testing.F) {
	b, _ := json.Marshal(Received{Recorders: []Counts{
		counts(recA, rcount("reseed", "quorum-lost", "success", 1), rcount("restore", "", "failure", 2)), counts(recB)}})
	f.Add(b)
	f.Add([]byte(`{"recorders":[{"recorder":"00000000000000aa","actions":[{"action":"a","result":"b","count":-1}]}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		have := r.Recorders
		for _, rc := range r.Recorders {
			if err := rc.Validate(); err != nil {
				t.Fatalf("parsed counts do not validate: %v", err)
			}
			out, changed, err := Merge(have, rc)
			if err != nil || changed {
				t.Fatalf("merging %v into what holds it: changed=%v %v", rc, changed, err)
			}
			have = out
		}
		again, err := json.Marshal(&Received{Recorders: have})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(again); err != nil {
			t.Fatalf("merged counts do not parse again: %v", err)
		}
	})
}
