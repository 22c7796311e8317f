package bench

import (
	"testing"

	"github.com/etcd-steward/steward/test/bench/hostsbench"
	"github.com/etcd-steward/steward/test/harness"
)

// BenchmarkHostsQuorumLossRecovery: the time from losing quorum to a
// healthy cluster with the exact keyspace, three members on three hosts
// (network namespaces, one agent each, the coordinator in the root
// namespace) against three members on one host, the same keyspace
// (STEWARD_BENCH_RECOVERY_MB, default 150 MB of random 10 KB values,
// hostsbench.FillRandom; the run is hostsbench.QuorumLossRun, which the
// operator's BenchmarkOperatorQuorumLoss runs as its baseline) and an S3 server (versitygw) for the backups on both
// sides. Two of the three members lose their data dirs (removed, their
// etcd killed, while their agents run: the agents restart them and refuse,
// their data is gone), and the cluster comes back
//
//   - recover: by `steward recover` on the coordinator, run as soon as
//     `steward status` says quorum is lost (polled one call after the other,
//     as an operator's alert would);
//   - auto: with no command (recovery.mode auto, gracePeriodSeconds 5): the
//     one-host agent's loop, or on three hosts the coordinator's `certs
//     renew --watch` process, once its agents prove quorum lost.
//
// Each is a sub-benchmark with a fresh cluster: one-host/recover,
// one-host/auto, three-hosts/recover, three-hosts/auto. Phases
// (b.ReportMetric, seconds), from the recovery's progress lines (recover's
// stderr, or the log of the process that recovered automatically):
//
//   - detect: the loss to `recover` starting (status reports quorum lost),
//     or to the automatic recovery recording its action (its 5 s rounds and
//     the grace period included);
//   - view: the recovery's own status read, until it says quorum lost;
//   - inspect: every member stopped, each data dir inspected through its
//     agent, the backups listed, up to the decision (here a reseed from the
//     surviving member, whose data is not behind the newest backup);
//   - seed: the seed run alone until its WAL is applied, its database
//     fetched, bumped above every revision served, staged and committed,
//     run alone with --force-new-cluster, started and healthy;
//   - snapshot: the fresh full snapshot of the seed stored in S3;
//   - restore: seed and snapshot together;
//   - rejoin: the two others added as learners, caught up, promoted, moved
//     to their client URLs;
//   - healthy: the end of the recovery to `steward status` showing three
//     healthy voters; total: the loss to that.
func BenchmarkHostsQuorumLossRecovery(b *testing.B) {
	mb := envInt("STEWARD_BENCH_RECOVERY_MB", 150)
	v := harness.Versions()[1]
	for range b.N {
		for _, side := range []string{"one-host", "three-hosts"} {
			for _, mode := range []string{"recover", "auto"} {
				b.Run(side+"/"+mode, func(b *testing.B) {
					b.Logf("load average at the start: %s", hostsbench.Loadavg())
					r := hostsbench.QuorumLossRun(b, hostsbench.QuorumLoss{Side: side, Mode: mode, Version: v, MB: mb})
					b.Logf("load average at the end: %s", hostsbench.Loadavg())
					r.Report(b, "")
				})
			}
		}
	}
}
