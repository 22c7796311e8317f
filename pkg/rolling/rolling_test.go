package rolling

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/status"
)

func member(name, role string, applied uint64) status.MemberStatus {
	return status.MemberStatus{Name: name, Role: role, Healthy: true, InSpec: true, RaftAppliedIndex: applied}
}

func TestTransferee(t *testing.T) {
	unhealthy := member("d", "follower", 500)
	unhealthy.Healthy = false
	foreign := member("f", "follower", 500)
	foreign.InSpec = false
	base := []status.MemberStatus{
		member("a", "leader", 100),
		member("b", "follower", 90),
		member("c", "follower", 99),
		unhealthy,
		member("e", "learner", 500),
		foreign,
	}
	for _, tc := range []struct {
		name    string
		members []status.MemberStatus
		from    string
		pending []string
		want    string
	}{
		{"most caught up voter", base, "a", nil, "c"},
		{"never the member acted on", base, "c", nil, "a"},
		{"not pending beats more caught up", base, "a", []string{"c"}, "b"},
		{"later turn beats sooner", base, "a", []string{"b", "c"}, "c"},
		{"later turn beats caught up", base, "a", []string{"c", "b"}, "b"},
		{"ties in status order", []status.MemberStatus{member("a", "leader", 5), member("b", "follower", 7), member("c", "follower", 7)}, "a", nil, "b"},
		{"no candidate", []status.MemberStatus{member("a", "leader", 5), member("e", "learner", 9), unhealthy}, "a", nil, ""},
		{"alone", []status.MemberStatus{member("a", "leader", 5)}, "a", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &status.Status{Members: tc.members}
			if got := Transferee(st, tc.from, tc.pending); got != tc.want {
				t.Errorf("Transferee(%s, pending %v) = %q, want %q", tc.from, tc.pending, got, tc.want)
			}
		})
	}
}

func TestOrder(t *testing.T) {
	for _, tc := range []struct {
		names  []string
		leader string
		want   []string
	}{
		{[]string{"a", "b", "c"}, "a", []string{"b", "c", "a"}},
		{[]string{"a", "b", "c"}, "c", []string{"a", "b", "c"}},
		{[]string{"a", "b", "c"}, "", []string{"a", "b", "c"}},
		{[]string{"a", "b"}, "z", []string{"a", "b"}},
	} {
		if got := Order(tc.names, tc.leader); !slices.Equal(got, tc.want) {
			t.Errorf("Order(%v, %q) = %v, want %v", tc.names, tc.leader, got, tc.want)
		}
	}
}

// fake is a cluster whose leadership moves when asked; log records every
// call in order.
type fake struct {
	st      status.Status
	log     []string
	moveErr error
}

func newFake(leader string, names ...string) *fake {
	f := &fake{}
	for _, n := range names {
		role := "follower"
		if n == leader {
			role = "leader"
		}
		f.st.Members = append(f.st.Members, member(n, role, 10))
	}
	f.st.Cluster.Leader, f.st.Cluster.Quorate, f.st.Cluster.HealthyMembers = leader, true, len(names)
	return f
}

func (f *fake) Status(context.Context) (*status.Status, error) {
	f.log = append(f.log, "status")
	st := f.st
	st.Members = slices.Clone(f.st.Members)
	return &st, nil
}

func (f *fake) MoveLeader(_ context.Context, to string) error {
	f.log = append(f.log, "move "+to)
	if f.moveErr != nil {
		return f.moveErr
	}
	for i := range f.st.Members {
		m := &f.st.Members[i]
		switch m.Name {
		case to:
			m.Role = "leader"
		case f.st.Cluster.Leader:
			m.Role = "follower"
		}
	}
	f.st.Cluster.Leader = to
	return nil
}

func (f *fake) action() Action {
	return Action{
		Gate: func(st *status.Status, name string) error {
			f.log = append(f.log, "gate "+name)
			if st.Cluster.HealthyMembers < len(st.Members) {
				return fmt.Errorf("not every member is healthy: %s", st.Unhealthy())
			}
			return nil
		},
		Act: func(_ context.Context, _ *status.Status, name string) error {
			f.log = append(f.log, "act "+name)
			return nil
		},
		CaughtUp: func(_ context.Context, name string) error {
			f.log = append(f.log, "wait "+name)
			return nil
		},
	}
}

func TestEachLeaderLastOneTransfer(t *testing.T) {
	f := newFake("a", "a", "b", "c")
	if err := f.action().Each(t.Context(), f, nil); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"status", "gate b", "act b", "wait b",
		"status", "gate c", "act c", "wait c",
		"status", "gate a", "move b", "act a", "wait a",
	}
	if !slices.Equal(f.log, want) {
		t.Fatalf("calls\n %v\nwant\n %v", f.log, want)
	}
}

func TestEachKeepLeader(t *testing.T) {
	f := newFake("b", "a", "b", "c")
	a := f.action()
	a.KeepLeader = true
	if err := a.Each(t.Context(), f, []string{"c", "b", "a"}); err != nil {
		t.Fatal(err)
	}
	var acts []string
	for _, l := range f.log {
		if strings.HasPrefix(l, "move") {
			t.Fatalf("KeepLeader moved leadership: %v", f.log)
		}
		if s, ok := strings.CutPrefix(l, "act "); ok {
			acts = append(acts, s)
		}
	}
	if want := []string{"c", "a", "b"}; !slices.Equal(acts, want) {
		t.Fatalf("acted on %v, want %v (caller's order, the leader last)", acts, want)
	}
}

func TestEachStopsAtGate(t *testing.T) {
	f := newFake("a", "a", "b", "c")
	a := f.action()
	act := a.Act
	a.Act = func(ctx context.Context, st *status.Status, name string) error {
		if name == "b" {
			f.st.Members[2].Healthy = false // c goes down while b is acted on
			f.st.Cluster.HealthyMembers--
		}
		return act(ctx, st, name)
	}
	err := a.Each(t.Context(), f, nil)
	if err == nil || !strings.Contains(err.Error(), "not every member is healthy") {
		t.Fatalf("err = %v, want the gate's refusal", err)
	}
	if slices.Contains(f.log, "act c") || slices.Contains(f.log, "act a") {
		t.Fatalf("acted after the gate refused: %v", f.log)
	}
}

func TestEachStopsAtActionAndWaitErrors(t *testing.T) {
	boom := errors.New("boom")
	for _, where := range []string{"act", "wait", "move"} {
		t.Run(where, func(t *testing.T) {
			f := newFake("b", "a", "b", "c")
			a := f.action()
			switch where {
			case "act":
				a.Act = func(_ context.Context, _ *status.Status, name string) error {
					f.log = append(f.log, "act "+name)
					return boom
				}
			case "wait":
				a.CaughtUp = func(_ context.Context, name string) error {
					f.log = append(f.log, "wait "+name)
					return boom
				}
			case "move":
				f.moveErr = boom
				a.Gate = nil
			}
			names := []string{"a", "b", "c"}
			if where == "move" {
				names = []string{"b"} // the leader first and only
			}
			if err := a.Each(t.Context(), f, names); !errors.Is(err, boom) {
				t.Fatalf("err = %v, want boom", err)
			}
			if where != "move" && slices.Contains(f.log, "act c") {
				t.Fatalf("went on after the error: %v", f.log)
			}
			if where == "move" && slices.Contains(f.log, "act b") {
				t.Fatalf("acted on the leader after the transfer failed: %v", f.log)
			}
		})
	}
}

func TestMemberNoTransferee(t *testing.T) {
	f := newFake("a", "a", "b")
	f.st.Members[1].Role = "learner"
	err := f.action().Member(t.Context(), f, nil, "a", nil)
	if !errors.Is(err, ErrNoTransferee) || err.Error() != "a leads and no other healthy voting member can take over" {
		t.Fatalf("err = %v", err)
	}
	if slices.Contains(f.log, "act a") {
		t.Fatalf("acted on the leader with nowhere to move leadership: %v", f.log)
	}
}

func TestContextHonoured(t *testing.T) {
	f := newFake("a", "a", "b", "c")
	ctx, cancel := context.WithCancel(t.Context())
	a := f.action()
	a.Act = func(_ context.Context, _ *status.Status, name string) error {
		f.log = append(f.log, "act "+name)
		cancel()
		return nil
	}
	if err := a.Each(ctx, f, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if slices.Contains(f.log, "act c") {
		t.Fatalf("acted after cancellation: %v", f.log)
	}
}
