package bench

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/bench/hostsbench"
	"github.com/etcd-steward/steward/test/harness"
)

// peerDelays are the one-way delays between hosts of
// BenchmarkHostsLatencyUpgrade: a round trip between two members on
// different hosts takes twice as long.
var peerDelays = []time.Duration{2 * time.Millisecond, 20 * time.Millisecond}

// BenchmarkHostsLatencyUpgrade: the rolling upgrade of
// BenchmarkHostsRollingUpgrade (3.5 -> 3.6 -> 3.7, one client writing 1 KiB
// values through every member throughout) on one host, then on three hosts
// with each of peerDelays between them, in the same run and from the same
// empty cluster: duration, client errors by kind, longest stall, p50/p99.
//
// The delay is a userspace proxy on every peer link between two hosts
// (Hosts.DelayPeers: the kernel has no netem qdisc), D each way; clients
// and agents (the root namespace) are not delayed. Before the members
// start, the benchmark measures a round trip through every link (an echo
// server on the member's peer address) and fails if one is under 2D; after
// the upgrade, it fails if a link carried no connection of etcd's.
//
// Then, on each side's upgraded cluster, without the upgrade: the median of
// sequential writes through the leader's endpoint alone and through a
// follower's alone (writesVia), to tell how many one-way trips between
// hosts a write pays on either.
func BenchmarkHostsLatencyUpgrade(b *testing.B) {
	vs := harness.Versions()
	from, to := vs[0], vs[2]
	for range b.N {
		b.Logf("load average at the start: %s", hostsbench.Loadavg())
		e := harness.New(b)
		e.WriteSpec(3, from, func(s *spec.Cluster) { s.Backup.Continuous = false })
		e.MustRun("up")
		one := hostsbench.TimedUpgrade(b, e, to)
		oneVia := writesVia(b, e)
		e.MustRun("down")
		b.Logf("load average after the one-host run: %s", hostsbench.Loadavg())
		one.Report(b, "one-host")
		oneVia.report(b, "one-host")

		for _, d := range peerDelays {
			side := fmt.Sprintf("delay-%gms", float64(d)/float64(time.Millisecond))
			hs := harness.NewHosts(b, 3)
			hs.Init(from)
			links := hs.DelayPeers(b, d)
			rtt := checkPeerDelay(b, hs, links, d)
			hs.StartAgents()
			hs.MustRun("up")
			hs.WaitStatus(time.Minute, "three healthy members on three hosts", harness.Healthy)
			r := hostsbench.TimedUpgrade(b, hs.Env, to)
			via := writesVia(b, hs.Env)
			var conns, bytes, full int64
			for _, l := range links {
				s := l.Proxy.Stats()
				if s.Conns == 0 || s.Bytes == 0 {
					b.Fatalf("%s: no etcd traffic went through the link from host %s to %s (%+v): the delay was not applied",
						side, l.From.Name, l.Target, s)
				}
				conns, bytes, full = conns+s.Conns, bytes+s.Bytes, full+s.QueueFull
			}
			hs.MustRun("down")
			b.Logf("load average after the %s run: %s", side, hostsbench.Loadavg())
			r.Report(b, side)
			via.report(b, side)
			b.ReportMetric(hostsbench.MS(rtt), side+"-peer-rtt-ms")
			b.ReportMetric(float64(conns), side+"-proxied-conns")
			b.ReportMetric(float64(bytes)/(1<<20), side+"-proxied-MiB")
			b.ReportMetric(float64(full), side+"-proxy-queue-full")
			b.Logf("%s: %d peer connections through %d delayed links, %.1f MiB, the queue full %d times",
				side, conns, len(links), float64(bytes)/(1<<20), full)
		}
	}
}

// checkPeerDelay measures round trips through every delayed link (from its
// host to an echo server on the member's peer address, before the member
// listens there) and fails the benchmark if one is under 2d: the delay is
// not applied. It returns the median of the links' medians.
func checkPeerDelay(b *testing.B, hs *harness.Hosts, links []*harness.DelayedLink, d time.Duration) time.Duration {
	b.Helper()
	var meds []time.Duration
	for _, l := range links {
		host, _, _ := net.SplitHostPort(l.Target)
		var to *harness.Host
		for _, h := range hs.Hosts {
			if h.Addr == host {
				to = h.Host
			}
		}
		if to == nil {
			b.Fatalf("no host has the address of %s", l.Target)
		}
		rtts, err := l.From.MeasureRTT(b, to, l.Target, 20)
		if err != nil {
			b.Fatalf("round trip from host %s to %s: %v", l.From.Name, l.Target, err)
		}
		med := rtts[len(rtts)/2]
		b.Logf("round trips from host %s to %s through the proxy: min %s, median %s, max %s (want 2 x %s)",
			l.From.Name, l.Target, rtts[0].Round(10*time.Microsecond), med.Round(10*time.Microsecond), rtts[len(rtts)-1].Round(10*time.Microsecond), d)
		if rtts[0] < 2*d {
			b.Fatalf("round trip from host %s to %s took %s, under 2 x %s: the delay is not applied", l.From.Name, l.Target, rtts[0], d)
		}
		meds = append(meds, med)
	}
	slices.Sort(meds)
	return meds[len(meds)/2]
}

// viaWrites is the median latency of sequential writes through one
// member's endpoint: the leader's, and a follower's.
type viaWrites struct {
	leader, follower time.Duration
}

// viaWriteCount is how many writes writesVia makes through each member.
const viaWriteCount = 60

// writesVia makes viaWriteCount sequential 1 KiB writes through the
// leader's client URL alone, then as many through a follower's alone, and
// returns the median of each. Through the leader a write pays one round
// trip between members (append to a follower, its acknowledgement); through
// a follower also the forwarding of the proposal to the leader and the
// leader's word that it committed: twice as many trips between hosts.
func writesVia(b *testing.B, e *harness.Env) viaWrites {
	b.Helper()
	st := e.Status()
	var leader, follower string
	for _, m := range st.Members {
		switch {
		case m.Role == "leader":
			leader = m.Name
		case follower == "":
			follower = m.Name
		}
	}
	if leader == "" || follower == "" {
		b.Fatalf("no leader and follower to write through: %+v", st.Members)
	}
	med := func(member string) time.Duration {
		cli := e.Client(member)
		defer cli.Close()
		val := strings.Repeat("v", 1024)
		var d []time.Duration
		for i := range viaWriteCount {
			ctx, cancel := context.WithTimeout(b.Context(), 10*time.Second)
			start := time.Now()
			_, err := cli.Put(ctx, fmt.Sprintf("via/%s/%d", member, i), val)
			cancel()
			if err != nil {
				b.Fatalf("write through %s: %v", member, err)
			}
			d = append(d, time.Since(start))
		}
		slices.Sort(d)
		return d[len(d)/2]
	}
	return viaWrites{leader: med(leader), follower: med(follower)}
}

func (v viaWrites) report(b *testing.B, side string) {
	b.ReportMetric(hostsbench.MS(v.leader), side+"-via-leader-p50-ms")
	b.ReportMetric(hostsbench.MS(v.follower), side+"-via-follower-p50-ms")
	b.Logf("%s: %d sequential writes through the leader alone: median %.1f ms; through a follower alone: median %.1f ms",
		side, viaWriteCount, hostsbench.MS(v.leader), hostsbench.MS(v.follower))
}
