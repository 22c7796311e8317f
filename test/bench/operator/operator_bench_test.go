package operator_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/test/bench/hostsbench"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/operatorfixture"
	"github.com/etcd-steward/steward/test/workload"
)

// BenchmarkOperatorMemberPodDeleted: the time from the leader's member
// pod deleted (default grace period) to the EtcdCluster's status showing
// three ready members with AllMembersReady, Ready and Scaled again
// (operatorfixture.WaitMembers, polled every second): the StatefulSet's
// new pod, its agent restarting the member from its claim, the member
// rejoining with its ID, the next reconcile's status. A writer
// (hostsbench.MeasureWrites) through the client Service meanwhile: its
// failed writes and longest stall.
func BenchmarkOperatorMemberPodDeleted(b *testing.B) {
	for range b.N {
		c := harness.LocalKube(b)
		const ns = "bench-pod-deleted"
		cs, cl := operatorfixture.Setup(b, c, ns, operatorfixture.StewardImage(b, c))
		ec := operatorfixture.ScaleCluster(b, cs, cl, ns, 3)
		st := operatorfixture.WaitMembers(b, cl, ec, 3, time.Minute)
		ids := operatorfixture.MemberIDs(st)
		w := hostsbench.MeasureWrites(b, operatorfixture.ServiceClient(b, c, cs, ec))
		b.Logf("load average at the start: %s", hostsbench.Loadavg())

		start := time.Now()
		operatorfixture.DeletePod(b, cs, ns, st.Leader)
		st = operatorfixture.WaitMembers(b, cl, ec, 3, 5*time.Minute)
		took := time.Since(start)
		res := w.Stop()
		if got := operatorfixture.MemberIDs(st); fmt.Sprint(got) != fmt.Sprint(ids) {
			b.Errorf("member IDs after the leader's pod came back: %v, want %v", got, ids)
		}
		r := hostsbench.Summarize("pod-deleted", took, res)
		b.Logf("load average at the end: %s", hostsbench.Loadavg())
		b.ReportMetric(took.Seconds(), "pod-deleted-to-all-ready-s")
		r.Report(b, "writer")
	}
}

// BenchmarkOperatorQuorumLoss: the time from quorum loss to Ready, in
// pods against hosts, the same shape on both sides: three members of the
// embedded etcd version, continuous backups to an S3 server (versitygw:
// the local Kubernetes' own for the pods), recovery mode auto with a
// grace period of 10 s (the EtcdCluster's minimum), STEWARD_BENCH_
// OPERATOR_RECOVERY_MB (default 50) of random 10 KB values written
// (hostsbench.FillRandom) and backed up, then two of the three members'
// data lost, and the recovery by no command.
//
//   - hosts (first, its cluster down before the pods' is made):
//     hostsbench.QuorumLossRun on three hosts (network namespaces),
//     BenchmarkHostsQuorumLossRecovery's three-hosts/auto: two data dirs
//     removed and their etcd killed; metrics hosts-*;
//   - pods: the claims and pods of db-1 and db-2 deleted
//     (operatorfixture.DeleteVolumesAndPods); the time runs until status
//     shows Ready, AllMembersReady, BackupReady, three ready members and
//     lastOperation Recover Succeeded (polled every 2 s); detect and
//     recovery from lastOperation's start and end times (whole seconds);
//     the keyspace under data/ is then the one from before the loss.
//     Metrics pods-*.
func BenchmarkOperatorQuorumLoss(b *testing.B) {
	mb := envInt(b, "STEWARD_BENCH_OPERATOR_RECOVERY_MB", 50)
	const grace = 10
	v := binaries.EmbeddedVersion()
	for range b.N {
		c := harness.LocalKube(b)
		b.Logf("load average at the start: %s", hostsbench.Loadavg())
		hosts := hostsbench.QuorumLossRun(b, hostsbench.QuorumLoss{Side: "three-hosts", Mode: "auto", Version: v, MB: mb, GraceSeconds: grace})
		b.Logf("load average after the hosts' run: %s", hostsbench.Loadavg())

		const ns = "bench-quorum"
		cs, cl := operatorfixture.Setup(b, c, ns, operatorfixture.StewardImage(b, c))
		operatorfixture.S3Secret(b, c, cs, ns)
		ec := &v1alpha1.EtcdCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
			Spec: v1alpha1.EtcdClusterSpec{Replicas: 3,
				Backup: &v1alpha1.Backup{
					S3:            &v1alpha1.S3{Endpoint: c.S3Endpoint, Bucket: c.S3Bucket, Prefix: ns + "/", CredentialsSecret: "s3"},
					DeltaMaxAgeMs: 1000,
				},
				Recovery: v1alpha1.Recovery{Mode: "auto", GracePeriodSeconds: grace},
			},
		}
		operatorfixture.CreateClusters(b, cs, cl, ec)
		operatorfixture.WaitHealthy(b, cl, ec, 3, "EtcdCluster db Ready and backed up", 8*time.Minute, func(st v1alpha1.EtcdClusterStatus) error {
			if st.LastBackupTime == nil {
				return fmt.Errorf("no last backup time")
			}
			return nil
		})
		cli := operatorfixture.ServiceClient(b, c, cs, ec)
		start := time.Now()
		hostsbench.FillRandom(b, cli, mb)
		filled := time.Now()
		fill := filled.Sub(start)
		want := workload.TakeDigest(b, cli, "data/", 0)
		operatorfixture.WaitBackedUp(b, c, ns+"/", want.Rev, 5*time.Minute)
		b.Logf("pods: %d MB written in %s through %s-client; backed up %s after", mb, fill.Round(100*time.Millisecond), ec.Name, time.Since(filled).Round(100*time.Millisecond))

		lost := time.Now()
		operatorfixture.DeleteVolumesAndPods(b, cs, ns, "db-1", "db-2")
		st := operatorfixture.WaitHealthy(b, cl, ec, 3, "EtcdCluster db Ready again after the quorum loss", 10*time.Minute, func(st v1alpha1.EtcdClusterStatus) error {
			if op := st.LastOperation; op == nil || op.Type != "Recover" || op.State != "Succeeded" || op.EndTime == nil {
				return fmt.Errorf("last operation %+v", st.LastOperation)
			}
			return nil
		})
		ready := time.Now()
		op := st.LastOperation
		workload.RequireEqual(b, "the keyspace under data/ after the recovery", workload.TakeDigest(b, cli, "data/", 0), want)
		b.Logf("load average at the end: %s", hostsbench.Loadavg())
		b.Logf("pods: quorum loss -> Ready in %s: detect %s, recovery %s, Ready %s after it; %s",
			ready.Sub(lost).Round(100*time.Millisecond), op.StartTime.Sub(lost).Round(time.Second),
			op.EndTime.Sub(op.StartTime.Time), ready.Sub(op.EndTime.Time).Round(time.Second), op.Description)

		hosts.Report(b, "hosts-")
		b.ReportMetric(ready.Sub(lost).Seconds(), "pods-total-s")
		b.ReportMetric(op.StartTime.Sub(lost).Seconds(), "pods-detect-s")
		b.ReportMetric(op.EndTime.Sub(op.StartTime.Time).Seconds(), "pods-recovery-s")
		b.ReportMetric(ready.Sub(op.EndTime.Time).Seconds(), "pods-ready-s")
		b.ReportMetric(fill.Seconds(), "pods-fill-s")
	}
}

// BenchmarkOperatorScale3To5: the time from spec.replicas 3 -> 5 to five
// ready voting members, AllMembersReady, Scaled AsRequested and a
// StatefulSet of five (operatorfixture.WaitMembers): each new member's
// join key and pod, its host in the spec, joined as a learner, caught up,
// promoted, one after the other; under the writer and the
// linearizability checker through the client Service (every acknowledged
// write present, the history linearizable).
func BenchmarkOperatorScale3To5(b *testing.B) {
	for range b.N {
		c := harness.LocalKube(b)
		const ns = "bench-scale"
		cs, cl := operatorfixture.Setup(b, c, ns, operatorfixture.StewardImage(b, c))
		ec := operatorfixture.ScaleCluster(b, cs, cl, ns, 3)
		l := operatorfixture.StartLoad(b, "scale", operatorfixture.ServiceClient(b, c, cs, ec))
		b.Logf("load average at the start: %s", hostsbench.Loadavg())
		start := time.Now()
		operatorfixture.SetReplicas(b, c, cl, ec, 5, false)
		st := operatorfixture.WaitMembers(b, cl, ec, 5, 10*time.Minute)
		took := time.Since(start)
		if op := st.LastOperation; op == nil || op.Type != "ScaleUp" || op.State != "Succeeded" {
			b.Errorf("last operation %+v", op)
		}
		l.GoesOn(b, "after 3 -> 5")
		res := l.Stop(b, "scale 3 -> 5")
		b.Logf("load average at the end: %s", hostsbench.Loadavg())
		b.ReportMetric(took.Seconds(), "scale-3-to-5-s")
		b.ReportMetric(float64(res.FailedAttempts), "writer-failed-attempts")
		b.ReportMetric(float64(len(res.Failed)), "writer-errors")
	}
}

// BenchmarkOperatorUpgradeRollback: client errors and the longest stall
// of one writer (hostsbench.MeasureWrites: 1 KiB values one after the
// other, 10 s per write, no retry) through an upgrade from the store's
// oldest minor to its newest (3.5 -> 3.7, through 3.6, member by member)
// and the rollback to the oldest, in pods against hosts in the same run:
//
//   - hosts (first, its cluster down before the pods' is made): three
//     hosts (network namespaces, one agent each), `steward upgrade apply
//     --to` then `steward rollback` (hostsbench.TimedPlans), the writer
//     through every member; metrics hosts-*;
//   - pods: a 3-member EtcdCluster (no backups) whose spec.version is set
//     to the newest, then back to the oldest, each until every member runs
//     it with AllMembersReady and no plan left (operatorfixture.WaitVersion),
//     the writer through the client Service NAME-client (kube-proxy sends
//     each connection to one ready member pod); metrics pods-*.
//
// Each side's upgrade-rollback-s is both plans' time; errors by kind,
// p50/p99, max-stall-ms (the longest acknowledged write) and
// longest-gap-ms (between two acknowledgements) are hostsbench.UpgradeRun's.
func BenchmarkOperatorUpgradeRollback(b *testing.B) {
	vs := harness.Versions()
	from, to := vs[0], vs[2]
	for range b.N {
		c := harness.LocalKube(b)
		b.Logf("load average at the start: %s", hostsbench.Loadavg())
		hs := harness.NewHosts(b, 3)
		hs.Init(from)
		hs.StartAgents()
		hs.MustRun("up")
		hs.WaitStatus(time.Minute, "three healthy members on three hosts", harness.Healthy)
		hosts := hostsbench.TimedPlans(b, hs.Env, "upgrade-rollback",
			hostsbench.PlanStep{Args: []string{"upgrade", "apply", "--to", to}, To: to},
			hostsbench.PlanStep{Args: []string{"rollback"}, To: from})
		hs.MustRun("down")
		b.Logf("load average after the hosts' run: %s", hostsbench.Loadavg())

		const ns = "bench-upgrade"
		cs, cl := operatorfixture.Setup(b, c, ns, operatorfixture.UpgradeImage(b, c))
		ec := &v1alpha1.EtcdCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
			Spec:       v1alpha1.EtcdClusterSpec{Replicas: 3, Version: from},
		}
		operatorfixture.CreateClusters(b, cs, cl, ec)
		operatorfixture.WaitVersion(b, cl, ec, 3, from, 8*time.Minute, nil)
		w := hostsbench.MeasureWrites(b, operatorfixture.ServiceClient(b, c, cs, ec))
		start := time.Now()
		operatorfixture.SetVersion(b, cl, ec, to)
		got := operatorfixture.WaitVersion(b, cl, ec, 3, to, 12*time.Minute, nil)
		upgraded := time.Now()
		if op := got.Status.LastOperation; op == nil || op.Type != "Upgrade" || op.State != "Succeeded" {
			b.Errorf("last operation after the upgrade: %+v", op)
		}
		operatorfixture.SetVersion(b, cl, ec, from)
		got = operatorfixture.WaitVersion(b, cl, ec, 3, from, 12*time.Minute, nil)
		took := time.Since(start)
		if op := got.Status.LastOperation; op == nil || op.Type != "Rollback" || op.State != "Succeeded" {
			b.Errorf("last operation after the rollback: %+v", op)
		}
		res := w.Stop()
		for _, f := range res.Failed {
			b.Logf("pods: failed write %d: began %.2f s into the upgrade-rollback, failed after %.2f s: %v",
				f.Index, f.Start.Sub(start).Seconds(), f.End.Sub(f.Start).Seconds(), f.Err)
		}
		pods := hostsbench.Summarize("upgrade-rollback", took, res)
		b.Logf("load average at the end: %s", hostsbench.Loadavg())
		hosts.Report(b, "hosts")
		pods.Report(b, "pods")
		b.ReportMetric(upgraded.Sub(start).Seconds(), "pods-upgrade-s")
		b.ReportMetric(start.Add(took).Sub(upgraded).Seconds(), "pods-rollback-s")
	}
}

// BenchmarkOperatorResources: the operator pod's CPU (cores on average)
// and peak memory (resident, and the working set: usage less inactive
// page cache), read every second from its cgroup
// (operatorfixture.WatchUsage: the operator and the certificate renewal
// process it runs per cluster), at rest (STEWARD_BENCH_OPERATOR_REST_S,
// default 30, with one ready 3-member cluster, reconciled every 10 s) and
// under churn (spec.replicas 3 -> 5 -> 3 -> 1 -> 3: eight members added
// or removed one at a time, a status every step).
func BenchmarkOperatorResources(b *testing.B) {
	rest := time.Duration(envInt(b, "STEWARD_BENCH_OPERATOR_REST_S", 30)) * time.Second
	for range b.N {
		c := harness.LocalKube(b)
		const ns = "bench-resources"
		cs, cl := operatorfixture.Setup(b, c, ns, operatorfixture.StewardImage(b, c))
		ec := operatorfixture.ScaleCluster(b, cs, cl, ns, 3)
		use := operatorfixture.WatchUsage(b, cs)
		b.Logf("load average at the start: %s", hostsbench.Loadavg())
		restStart := time.Now()
		select {
		case <-b.Context().Done():
			return
		case <-time.After(rest): // a window measured, not a wait for a state
		}
		restEnd := time.Now()
		for _, n := range []int32{5, 3, 1, 3} {
			operatorfixture.SetReplicas(b, c, cl, ec, n, false)
			operatorfixture.WaitMembers(b, cl, ec, int(n), 10*time.Minute)
		}
		churnEnd := time.Now()
		b.Logf("load average at the end: %s", hostsbench.Loadavg())
		for _, w := range []struct {
			name       string
			start, end time.Time
		}{{"rest", restStart, restEnd}, {"churn", restEnd, churnEnd}} {
			f, ok := use.Window(w.start, w.end)
			if !ok {
				b.Fatalf("%s: fewer than two samples of the operator's usage", w.name)
			}
			b.Logf("operator %s: %s", w.name, use.Between(w.start, w.end))
			b.ReportMetric(f.Cores, w.name+"-cores")
			b.ReportMetric(float64(f.PeakRSS)/(1<<20), w.name+"-peak-rss-MiB")
			b.ReportMetric(float64(f.PeakWS)/(1<<20), w.name+"-peak-working-set-MiB")
			b.ReportMetric(f.Span.Seconds(), w.name+"-window-s")
		}
	}
}

// envInt is the integer in the environment variable name, def when it
// is unset; anything else fails the benchmark.
func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive whole number", name, s)
	}
	return n
}
