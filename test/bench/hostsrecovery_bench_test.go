package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// BenchmarkHostsQuorumLossRecovery: the time from losing quorum to a
// healthy cluster with the exact keyspace, three members on three hosts
// (network namespaces, one agent each, the coordinator in the root
// namespace) against three members on one host, the same keyspace
// (STEWARD_BENCH_RECOVERY_MB, default 150 MB of random 10 KB values,
// fillRandomParallel) and an S3 server (versitygw) for the backups on both
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
					b.Logf("load average at the start: %s", loadavg())
					r := quorumLossRun(b, side, mode, v, mb)
					b.Logf("load average at the end: %s", loadavg())
					r.report(b)
				})
			}
		}
	}
}

// recoveryRun is one quorum loss and its recovery, times from the loss.
type recoveryRun struct {
	dbMB, fillMB float64
	fill         time.Duration
	action       string
	detect       time.Duration // loss -> the recovery starts
	view         time.Duration // the recovery's own status read
	inspect      time.Duration // members stopped, data dirs inspected
	seed         time.Duration // the seed rebuilt, started, healthy
	snapshot     time.Duration // the fresh full snapshot of the seed
	restore      time.Duration // seed + snapshot
	rejoin       time.Duration // the others added -> recovery done
	healthy      time.Duration // recovery done -> status healthy, 3 voters
	total        time.Duration // loss -> status healthy, 3 voters
}

func (r recoveryRun) report(b *testing.B) {
	b.ReportMetric(r.dbMB, "db-MB")
	b.ReportMetric(r.total.Seconds(), "total-s")
	b.ReportMetric(r.detect.Seconds(), "detect-s")
	b.ReportMetric(r.view.Seconds(), "view-s")
	b.ReportMetric(r.inspect.Seconds(), "inspect-s")
	b.ReportMetric(r.seed.Seconds(), "seed-s")
	b.ReportMetric(r.restore.Seconds(), "restore-s")
	b.ReportMetric(r.snapshot.Seconds(), "snapshot-s")
	b.ReportMetric(r.rejoin.Seconds(), "rejoin-s")
	b.ReportMetric(r.healthy.Seconds(), "healthy-s")
	rd := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	b.Logf("%s: %.0f MB written in %s (%.0f MB/s), database %.0f MB; recovered by %s in %s: detect %s, view %s, inspect %s, restore %s (seed %s, fresh full snapshot %s), rejoin %s, healthy %s",
		b.Name(), r.fillMB, rd(r.fill), r.fillMB/r.fill.Seconds(), r.dbMB, r.action, rd(r.total), rd(r.detect),
		rd(r.view), rd(r.inspect), rd(r.restore), rd(r.seed), rd(r.snapshot), rd(r.rejoin), rd(r.healthy))
}

// quorumLossRun builds a cluster of three members of version v on side
// ("one-host" or "three-hosts"), backups in S3, recovery.mode auto when
// mode is "auto"; fills it with mb MB, waits for the backups to hold every
// revision, loses two members' data dirs and times the recovery.
func quorumLossRun(b *testing.B, side, mode, v string, mb int) recoveryRun {
	var e *harness.Env
	var hs *harness.Hosts
	edit := func(s *spec.Cluster) {
		s.Etcd.QuotaBackendBytes = 8 << 30
		s.Backup.Continuous = true
		if mode == "auto" {
			s.Recovery = spec.Recovery{Mode: "auto", GracePeriodSeconds: 5}
		}
	}
	// logPath is the log of the process that runs the automatic recovery.
	var logPath string
	if side == "one-host" {
		e = harness.New(b)
		s3 := harness.StartS3(b)
		e.WriteSpec(3, v, func(s *spec.Cluster) {
			s.Backup.S3 = &spec.S3{Endpoint: s3.Endpoint, Bucket: s3.Bucket, CredentialsFile: s3.CredentialsFile, Prefix: "bench"}
			edit(s)
		})
		e.MustRun("up")
		logPath = filepath.Join(e.Dir, "logs", "agent.log")
	} else {
		hs = harness.NewHosts(b, 3)
		e = hs.Env
		s3 := harness.StartS3At(b, hs.Net.Addr)
		hs.Init(v, "--backup-s3-endpoint", s3.Endpoint, "--backup-s3-bucket", s3.Bucket,
			"--backup-s3-credentials-file", s3.CredentialsFile, "--backup-s3-prefix", "bench")
		s := hs.Spec()
		edit(s)
		if err := s.Save(filepath.Join(hs.Dir, spec.FileName)); err != nil {
			b.Fatal(err)
		}
		hs.StartAgents()
		hs.MustRun("up")
		logPath = filepath.Join(e.Dir, "logs", "certrenew.log")
	}
	e.WaitStatus(time.Minute, "three healthy members", harness.Healthy)

	var r recoveryRun
	cli := e.Client()
	start := time.Now()
	fillRandomParallel(b, cli, mb)
	r.fill, r.fillMB = time.Since(start), float64(mb)
	want := workload.TakeDigest(b, cli, "", 0)
	cli.Close()
	start = time.Now()
	harness.WaitBackedUpWithin(b, e, want.Rev, 5*time.Minute, 100*time.Millisecond)
	b.Logf("backups reached revision %d %s after the fill", want.Rev, time.Since(start).Round(100*time.Millisecond))
	st := e.Status()
	for _, m := range st.Members {
		r.dbMB = max(r.dbMB, float64(m.DBSize)/(1<<20))
	}

	// Two members lose their data: their data dirs removed, their etcd
	// killed. On three hosts they are etcd-1 and etcd-2 on h1 and h2.
	lostAt := time.Now()
	for _, name := range []string{"etcd-1", "etcd-2"} {
		m, ok := st.Member(name)
		if !ok {
			b.Fatalf("no member %s: %+v", name, st.Members)
		}
		sm, _ := e.Spec().Member(name)
		dir := filepath.Join(e.Dir, sm.DataDir)
		if hs != nil {
			dir = filepath.Join(hs.Host(sm.Agent).Dir, sm.DataDir)
		}
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		if err := syscall.Kill(m.PID, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
	}

	var done time.Time // the recovery ended
	if mode == "recover" {
		// An operator's alert: status polled until it says quorum is lost.
		harness.Eventually(b, time.Minute, 10*time.Millisecond, "status to report quorum lost", func() error {
			callAt := time.Now()
			so, se, err := e.Run("status", "-o", "json")
			b.Logf("status call ended %s after the loss, took %s", time.Since(lostAt).Round(10*time.Millisecond), time.Since(callAt).Round(10*time.Millisecond))
			if err != nil {
				return fmt.Errorf("steward status: %v: %s", err, strings.TrimSpace(se))
			}
			var s status.Status
			if err := json.Unmarshal([]byte(so), &s); err != nil {
				return err
			}
			if s.Cluster.Quorate {
				return fmt.Errorf("still quorate")
			}
			return nil
		})
		started := time.Now()
		r.detect = started.Sub(lostAt)
		lines := timedRun(b, e, "recover")
		done = time.Now()
		r.action = "recover"
		r.phases(b, lines, started, done)
	} else {
		var ar *status.AutoRecoveryState
		harness.Eventually(b, 10*time.Minute, 200*time.Millisecond, "an automatic recovery that succeeded", func() error {
			var err error
			if ar, err = status.ReadAutoRecovery(e.Dir); err != nil {
				return err
			}
			if ar == nil || ar.LastAction == nil || ar.LastAction.Result == "running" {
				return fmt.Errorf("state %+v", ar)
			}
			if ar.LastAction.Result != "success" {
				b.Fatalf("the automatic recovery failed: %+v", ar.LastAction)
			}
			return nil
		})
		a := ar.LastAction
		b.Logf("automatic recovery: %s, %s (%s)", a.Action, a.Message, a.Reason)
		r.action = "auto " + a.Action
		r.detect = a.Started.Sub(lostAt)
		done = a.Finished
		lines := logLines(b, logPath, "component=recovery", a.Started, a.Finished)
		for _, l := range lines {
			fmt.Fprintf(os.Stderr, "  %6.2f s  %s\n", l.at.Sub(a.Started).Seconds(), l.text)
		}
		r.phases(b, lines, a.Started, a.Finished)
	}
	// What the seed's agent did to its member meanwhile (started, stopped,
	// drained), to split the seed's isolated runs into start and stop.
	agentLog := filepath.Join(e.Dir, "logs", "agent.log")
	if hs != nil {
		agentLog = filepath.Join(hs.Host("h3").Dir, "logs", "agent-h3.log")
	}
	for _, l := range logLines(b, agentLog, "member=etcd-3", lostAt, done) {
		b.Logf("agent of etcd-3: %6.2f s after the loss: %s", l.at.Sub(lostAt).Seconds(), l.text)
	}
	e.WaitStatus(5*time.Minute, "three healthy voters", func(st *status.Status) bool {
		return harness.Healthy(st) && st.Cluster.VotingMembers == 3
	})
	healthyAt := time.Now()
	r.total = healthyAt.Sub(lostAt)
	r.healthy = max(0, healthyAt.Sub(done))
	after := e.Client()
	workload.RequireEqual(b, "keyspace after the recovery", workload.TakeDigest(b, after, "", 0), want)
	after.Close()
	if hs != nil {
		hs.MustRun("down")
	} else {
		e.MustRun("down")
	}
	return r
}

// phases splits a recovery's progress lines, from start to end, at the
// first line of each mark in turn: view (the recovery's own status read,
// to "quorum lost"), inspect (every member stopped and its data dir
// inspected, to the decision), seed (the seed rebuilt, run alone, started
// and healthy, to the fresh snapshot's stream), snapshot (the fresh full
// snapshot stored), rejoin (the others added, to the end). restore is seed
// and snapshot together.
func (r *recoveryRun) phases(b *testing.B, lines []timedLine, start, end time.Time) {
	marks := []string{"quorum lost (", "members have valid data", "streaming a snapshot from", "fresh full snapshot"}
	at := make([]time.Time, 0, len(marks)+1)
	i := 0
	for _, l := range lines {
		if i < len(marks) && strings.Contains(l.text, marks[i]) {
			at = append(at, l.at)
			i++
		}
	}
	if i < len(marks) {
		b.Fatalf("the recovery's progress lacks %q (%d lines)", marks[i], len(lines))
	}
	r.view, r.inspect, r.seed, r.snapshot = at[0].Sub(start), at[1].Sub(at[0]), at[2].Sub(at[1]), at[3].Sub(at[2])
	r.restore = r.seed + r.snapshot
	r.rejoin = end.Sub(at[3])
}

// logLine is one line of a steward process's log (slog's text format).
var logLine = regexp.MustCompile(`^time=(\S+) level=\S+ msg=("(?:[^"\\]|\\.)*"|\S+)`)

// logLines returns the messages of the log at path whose line contains
// filter (the automatic recovery's: component=recovery), logged from start
// to end, with their times.
func logLines(b *testing.B, path, filter string, start, end time.Time) []timedLine {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var out []timedLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := logLine.FindStringSubmatch(sc.Text())
		if m == nil || !strings.Contains(sc.Text(), filter) {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil || at.Before(start.Truncate(time.Millisecond)) || at.After(end) {
			continue
		}
		msg := m[2]
		if u, err := strconv.Unquote(msg); err == nil {
			msg = u
		}
		out = append(out, timedLine{at, msg})
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return out
}
