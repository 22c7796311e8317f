package bench

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// BenchmarkLeaderTransferErrors is issue 15's server-side experiment on
// the client errors of a rolling operation: it separates the two things a
// member step does, a leadership transfer and a member stop, and sees
// which client errors each causes and through which member they reach the
// client.
//
// Three members on the middle test version; one group of three plain
// clientv3 clients per member, each client dialling that member only (the
// linearizability checker's clients, raw: clientv3's own retries only,
// 3 s per request). Phase 1: twelve `steward leader move`s, leadership
// going round the members, nothing stopped. Phase 2: six drained stops and
// starts of a follower (`steward member stop` and `start`), no transfer.
// Every failed operation is attributed to the event whose window holds
// its call (from 3 s before the command to its end) and to the role its
// member had in that event: the old leader, the transferee or the third
// member of a transfer; the stopped member, the leader or the other
// follower of a stop.
func BenchmarkLeaderTransferErrors(b *testing.B) {
	vs := harness.Versions()
	for range b.N {
		e := harness.New(b)
		e.Up(3, vs[1])
		var names []string
		for _, m := range e.Status().Members {
			names = append(names, m.Name)
		}
		healthy := func(st *status.Status) bool { return harness.Healthy(st) }

		// Phase 1: transfers only.
		groups := startGroups(b, e, names, "transfers")
		var events []roleEvent
		for range 12 {
			st := e.WaitStatus(time.Minute, "every member healthy", healthy)
			from := leaderName(st)
			to := names[(slices.Index(names, from)+1)%len(names)]
			start := time.Now()
			e.MustRun("leader", "move", "--to", to)
			events = append(events, roleEvent{start: start, end: time.Now(), roles: map[string]string{
				from: "old leader", to: "transferee", third(names, from, to): "third member"}})
			// Spacing between events, so that each failure belongs to one
			// (a request gives up after 3 s).
			time.Sleep(3500 * time.Millisecond)
		}
		transfers := attribute(b, groups, events)

		// Phase 2: follower stops only.
		groups = startGroups(b, e, names, "stops")
		events = nil
		for i := range 6 {
			st := e.WaitStatus(time.Minute, "every member healthy", healthy)
			leader := leaderName(st)
			var followers []string
			for _, n := range names {
				if n != leader {
					followers = append(followers, n)
				}
			}
			stopped := followers[i%2]
			start := time.Now()
			e.MustRun("member", "stop", stopped)
			e.MustRun("member", "start", stopped)
			e.WaitStatus(time.Minute, "every member healthy after the restart", healthy)
			events = append(events, roleEvent{start: start, end: time.Now(), roles: map[string]string{
				stopped: "stopped member", leader: "leader", third(names, stopped, leader): "other follower"}})
			time.Sleep(3500 * time.Millisecond)
		}
		stops := attribute(b, groups, events)

		b.Logf("leadership transfers alone (12), failed operations by the role of the member the client dials:\n%s", transfers.table())
		b.Logf("drained stops of a follower alone (6), failed operations by the role of the member the client dials:\n%s", stops.table())
		b.ReportMetric(float64(transfers.count("DeadlineExceeded")), "transfer-timeouts")
		b.ReportMetric(float64(transfers.count("raft proposal dropped")), "transfer-proposals-dropped")
		b.ReportMetric(float64(stops.count("DeadlineExceeded")), "stop-timeouts")
		b.ReportMetric(float64(stops.count("")), "stop-failures")
	}
}

// roleEvent is one leadership transfer or member stop: when its command
// ran and the role each member had in it.
type roleEvent struct {
	start, end time.Time
	roles      map[string]string // member name → role
}

// group is the linearizability clients that dial one member only.
type group struct {
	member string
	base   time.Time // just before the checker started: its offsets' zero
	c      *workload.LinChecker
}

func startGroups(b *testing.B, e *harness.Env, names []string, phase string) []group {
	var gs []group
	for _, n := range names {
		var kvs []clientv3.KV
		for range 3 {
			kvs = append(kvs, e.Client(n))
		}
		base := time.Now()
		gs = append(gs, group{member: n, base: base,
			c: workload.StartLinearizable(b, kvs, workload.LinOptions{Prefix: phase + "/via-" + n})})
	}
	return gs
}

// attribution counts failed operations by (role, error kind); ops counts
// every operation.
type attribution struct {
	failed     map[[2]string]int
	unassigned map[string]int
	ops        int
}

func attribute(b *testing.B, gs []group, events []roleEvent) attribution {
	a := attribution{failed: map[[2]string]int{}, unassigned: map[string]int{}}
	for _, g := range gs {
		r := g.c.Stop()
		workload.RequireLinearizable(b, "via "+g.member, r)
		a.ops += len(r.Ops)
		for _, op := range r.Ops {
			if op.Err == nil {
				continue
			}
			call := g.base.Add(op.Call)
			kind := workload.ErrorKind(op.Err)
			role := ""
			for _, ev := range events {
				if !call.Before(ev.start.Add(-3*time.Second)) && !call.After(ev.end) {
					role = ev.roles[g.member]
				}
			}
			if role == "" {
				a.unassigned[kind]++
				continue
			}
			a.failed[[2]string{role, kind}]++
		}
	}
	return a
}

// count sums the failures whose kind contains s ("" for all).
func (a attribution) count(s string) int {
	n := 0
	for k, v := range a.failed {
		if strings.Contains(k[1], s) {
			n += v
		}
	}
	for k, v := range a.unassigned {
		if strings.Contains(k, s) {
			n += v
		}
	}
	return n
}

func (a attribution) table() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "        %d operations\n", a.ops)
	keys := slices.SortedFunc(maps.Keys(a.failed), func(x, y [2]string) int {
		return strings.Compare(x[0]+x[1], y[0]+y[1])
	})
	for _, k := range keys {
		fmt.Fprintf(&sb, "        via the %-15s %4d × %s\n", k[0], a.failed[k], k[1])
	}
	for _, k := range slices.Sorted(maps.Keys(a.unassigned)) {
		fmt.Fprintf(&sb, "        outside every event  %4d × %s\n", a.unassigned[k], k)
	}
	if len(a.failed)+len(a.unassigned) == 0 {
		sb.WriteString("        no failed operation\n")
	}
	return sb.String()
}

func leaderName(st *status.Status) string {
	for _, m := range st.Members {
		if m.Role == "leader" {
			return m.Name
		}
	}
	return ""
}

// third returns the member of three that is neither a nor b.
func third(names []string, a, b string) string {
	for _, n := range names {
		if n != a && n != b {
			return n
		}
	}
	return ""
}
