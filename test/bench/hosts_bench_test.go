package bench

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/bench/hostsbench"
	"github.com/etcd-steward/steward/test/harness"
)

// BenchmarkHostsRollingUpgrade: the rolling upgrade of
// BenchmarkRollingUpgrade (3.5 -> 3.6 -> 3.7, one client writing 1 KiB
// values through every member throughout) on three hosts (network
// namespaces, one agent each, the coordinator and the client in the root
// namespace), against the same upgrade on one host in the same run: duration, client
// errors by kind, longest write stall, p50/p99. Then, on the three hosts,
// the time from cutting a follower's host off to `steward status -o json`
// on the coordinator reporting it, for both ways of cutting: link down
// (Host.Cut) and every frame dropped (Host.CutSilently).
//
// Continuous backups are off on both sides: a multi-host cluster records
// them only to S3 (or a shared store), which would add a server the one
// host does not have; the comparison is then of the hosts alone.
func BenchmarkHostsRollingUpgrade(b *testing.B) {
	vs := harness.Versions()
	from, to := vs[0], vs[2]
	for range b.N {
		b.Logf("load average at the start: %s", hostsbench.Loadavg())

		// One host, first, and stopped before the three hosts start, so
		// neither run shares the machine with the other's cluster.
		e := harness.New(b)
		e.WriteSpec(3, from, func(s *spec.Cluster) { s.Backup.Continuous = false })
		e.MustRun("up")
		one := hostsbench.TimedUpgrade(b, e, to)
		e.MustRun("down")
		b.Logf("load average after the one-host run: %s", hostsbench.Loadavg())

		hs := harness.NewHosts(b, 3)
		hs.Init(from)
		hs.StartAgents()
		hs.MustRun("up")
		hs.WaitStatus(time.Minute, "three healthy members on three hosts", harness.Healthy)
		three := hostsbench.TimedUpgrade(b, hs.Env, to)
		b.Logf("load average after the three-host upgrade: %s", hostsbench.Loadavg())

		link := detectCut(b, hs, "link down (Cut)", (*harness.Host).Cut)
		silent := detectCut(b, hs, "frames dropped (CutSilently)", (*harness.Host).CutSilently)
		b.Logf("load average at the end: %s", hostsbench.Loadavg())

		one.Report(b, "one-host")
		three.Report(b, "three-hosts")
		link.report(b, "cut-link")
		silent.report(b, "cut-silent")
	}
}

// cutWindow is how long detectCut keeps polling status after a cut: long
// enough for the root namespace's neighbour entry of the cut host to fail
// (then a connection to it fails at once, "no route to host", instead of
// waiting out a timeout), to see whether status changes then.
const cutWindow = time.Minute

// detection is how long `steward status` took to report a cut host.
type detection struct {
	how string
	// healthy is one status call on the healthy cluster, before the cut.
	healthy time.Duration
	// named and agentDown run from the cut to the end of the first status
	// call whose output names the host unreachable in the member's
	// lastError, and says reachable=false in its agents[] entry; namedCall
	// and agentCall are those calls' own durations.
	named, namedCall, agentDown, agentCall time.Duration
	namedMsg, agentMsg                     string
	// fast is from the cut to the end of the first status call that
	// reported the host in under a second (without waiting out the probe
	// timeout of 2 s); 0 if none did within cutWindow.
	fast, fastCall time.Duration
	fastMsg        string
	// last is the last status call of the window, lastMsg its lastError.
	last    time.Duration
	lastMsg string
	polls   int
}

// detectCut cuts a follower's host off with cut, polls `steward status -o
// json` on the coordinator one call after the other for cutWindow (and
// until it reports the host both ways), then heals the host and waits for
// the cluster to be healthy again.
func detectCut(b *testing.B, hs *harness.Hosts, how string, cut func(*harness.Host, testing.TB)) detection {
	st := hs.Status()
	var victim status.MemberStatus
	for _, m := range st.Members {
		if m.Role == "follower" {
			victim = m
			break
		}
	}
	if victim.Name == "" {
		b.Fatalf("no follower to cut off: %+v", st.Members)
	}
	h := hs.Host(victim.Agent)
	want := fmt.Sprintf("host %s (%s) unreachable", h.Name, h.Addr)
	d := detection{how: how}
	start := time.Now()
	hs.Status()
	d.healthy = time.Since(start)

	cut(h.Host, b)
	at := time.Now()
	var seen string // what the previous call said, to log changes only
	for time.Since(at) < cutWindow || d.named == 0 || d.agentDown == 0 {
		if time.Since(at) > 2*cutWindow {
			b.Fatalf("%s: status did not report host %s within %s (member %s named: %v, agent down: %v)",
				how, h.Name, 2*cutWindow, victim.Name, d.named != 0, d.agentDown != 0)
		}
		start := time.Now()
		so, se, err := hs.Run("status", "-o", "json")
		end := time.Now()
		took := end.Sub(start)
		d.polls++
		if err != nil {
			b.Logf("%s: status call %d failed after %s: %v: %s", how, d.polls, took.Round(time.Millisecond), err, strings.TrimSpace(se))
			continue
		}
		var s status.Status
		if err := json.Unmarshal([]byte(so), &s); err != nil {
			b.Fatalf("parse status: %v\n%s", err, so)
		}
		m, _ := s.Member(victim.Name)
		var agentMsg string
		agentDown := false
		for _, a := range s.Agents {
			if a.Name == h.Name && !a.Reachable {
				agentDown, agentMsg = true, a.Error
			}
		}
		named := strings.Contains(m.LastError, want)
		fast := took < time.Second
		if now := fmt.Sprintf("%q %v %v", m.LastError, agentDown, fast); now != seen {
			b.Logf("%s: status call %d ended %s after the cut (took %s): member %s lastError %q; agent reachable %v",
				how, d.polls, end.Sub(at).Round(time.Millisecond), took.Round(time.Millisecond), victim.Name, m.LastError, !agentDown)
			seen = now
		}
		if d.named == 0 && named {
			d.named, d.namedCall, d.namedMsg = end.Sub(at), took, m.LastError
		}
		if d.agentDown == 0 && agentDown {
			d.agentDown, d.agentCall, d.agentMsg = end.Sub(at), took, agentMsg
		}
		if d.fast == 0 && named && fast {
			d.fast, d.fastCall, d.fastMsg = end.Sub(at), took, m.LastError
		}
		d.last, d.lastMsg = took, m.LastError
	}
	h.Heal(b)
	hs.WaitStatus(2*time.Minute, "host "+h.Name+" back after the cut", harness.Healthy)
	return d
}

func (d detection) report(b *testing.B, prefix string) {
	b.ReportMetric(d.named.Seconds(), prefix+"-member-named-s")
	b.ReportMetric(d.agentDown.Seconds(), prefix+"-agent-unreachable-s")
	b.ReportMetric(d.namedCall.Seconds(), prefix+"-status-call-s")
	b.ReportMetric(d.last.Seconds(), prefix+"-last-status-call-s")
	b.ReportMetric(d.healthy.Seconds(), prefix+"-healthy-status-call-s")
	b.Logf("%s: member lastError named the host after %s (that status call took %s): %q",
		d.how, d.named.Round(time.Millisecond), d.namedCall.Round(time.Millisecond), d.namedMsg)
	b.Logf("%s: agents[] said reachable=false after %s (that status call took %s): %q",
		d.how, d.agentDown.Round(time.Millisecond), d.agentCall.Round(time.Millisecond), d.agentMsg)
	if d.fast != 0 {
		b.ReportMetric(d.fast.Seconds(), prefix+"-fast-status-s")
		b.Logf("%s: from %s after the cut status reported the host in %s: %q",
			d.how, d.fast.Round(time.Millisecond), d.fastCall.Round(time.Millisecond), d.fastMsg)
	} else {
		b.Logf("%s: no status call within %s reported the host in under a second", d.how, cutWindow)
	}
	b.Logf("%s: %d status calls in %s; the last took %s (%q); one on the healthy cluster took %s",
		d.how, d.polls, cutWindow, d.last.Round(time.Millisecond), d.lastMsg, d.healthy.Round(time.Millisecond))
}
