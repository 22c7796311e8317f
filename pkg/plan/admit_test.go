package plan

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAdmit: the shared admission check's refusals, and what it admits,
// with each Admission option.
func TestAdmit(t *testing.T) {
	failed := &Plan{ID: "upgrade-1", Kind: KindUpgrade, State: Failed, CreatedAt: time.Unix(1, 0)}
	done := &Plan{ID: "upgrade-2", Kind: KindUpgrade, State: Done, CreatedAt: time.Unix(2, 0)}
	open := func(*Plan) error { return nil }
	custom := func(p *Plan) error { return Refusef(p, "custom %s", p.ID) }
	for _, tc := range []struct {
		name   string
		latest *Plan // nil: no plan
		locked bool
		broken bool // the plan database is not one
		a      Admission
		want   string // "": admitted
		is     error
	}{
		{name: "no plan", a: Admission{}},
		{name: "no plan, one needed", a: Admission{NeedPlan: true}, want: ErrNoPlan.Error(), is: ErrNoPlan},
		{name: "done plan", latest: done, a: Admission{}},
		{name: "open plan", latest: failed, a: Admission{},
			want: "upgrade plan upgrade-1 is failed"},
		{name: "open plan, worded", latest: failed, a: Admission{Refuse: custom}, want: "custom upgrade-1"},
		{name: "open plan, admitted", latest: failed, a: Admission{Refuse: open}},
		{name: "locked", latest: done, locked: true, a: Admission{}, want: ErrLocked.Error(), is: ErrLocked},
		{name: "locked, advice", latest: done, locked: true, a: Admission{Locked: fmt.Errorf("%w: stop it first", ErrLocked)},
			want: ErrLocked.Error() + ": stop it first", is: ErrLocked},
		{name: "locked, skipped", latest: done, locked: true, a: Admission{SkipLock: true}},
		{name: "locked, skipped, open plan", latest: failed, locked: true, a: Admission{SkipLock: true, Refuse: custom}, want: "custom upgrade-1"},
		{name: "unreadable", broken: true, a: Admission{}, want: "open plan database"},
		{name: "unreadable, ignored", broken: true, a: Admission{IgnoreUnreadable: true}},
		{name: "no plan, one needed, unreadable ignored", a: Admission{NeedPlan: true, IgnoreUnreadable: true}, want: ErrNoPlan.Error(), is: ErrNoPlan},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st := OpenStore(dir)
			if tc.latest != nil {
				p := *tc.latest
				if err := st.Save(t.Context(), &p); err != nil {
					t.Fatal(err)
				}
			}
			if tc.broken {
				if err := os.WriteFile(filepath.Join(dir, DBName), []byte("not a database"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tc.locked {
				l, err := st.TryLock()
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release()
			}
			got, err := Admit(st, tc.a)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Admit = %v, want admitted", err)
				}
				if tc.latest != nil && !tc.broken && (got == nil || got.ID != tc.latest.ID) {
					t.Fatalf("Admit returned latest %v, want %s", got, tc.latest.ID)
				}
				if tc.latest == nil && got != nil {
					t.Fatalf("Admit returned latest %s with no plan", got.ID)
				}
				return
			}
			if err == nil {
				t.Fatalf("Admit admitted; want %q", tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("Admit = %v, want it to wrap %v", err, tc.is)
			}
			if tc.broken {
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Admit = %q, want it to contain %q", err, tc.want)
				}
				return
			}
			if err.Error() != tc.want {
				t.Errorf("Admit = %q\nwant    %q", err, tc.want)
			}
			if oe, ok := errors.AsType[*OpenError](err); ok && oe.Plan.ID != tc.latest.ID {
				t.Errorf("OpenError names plan %s, want %s", oe.Plan.ID, tc.latest.ID)
			}
			// The default refusal is the typed one the commands add their
			// advice to (the open plan may be stopped: Abort).
			if tc.a.Refuse == nil && tc.latest != nil && tc.latest.Active() && !tc.locked {
				if ae, ok := errors.AsType[*ActiveError](err); !ok || ae.Plan.ID != tc.latest.ID || !ae.Abort || ae.Undo {
					t.Errorf("Admit = %#v, want the *ActiveError of plan %s, stoppable", err, tc.latest.ID)
				}
			}
		})
	}
}
