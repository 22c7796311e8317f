// Package hostsbench is what the benchmarks measure on hosts and share
// between the packages of test/bench: the data they write (Fill,
// FillRandom), the writer whose latencies, failed writes by kind and
// longest stall they report (MeasureWrites, TimedUpgrade, TimedPlans,
// Summarize, UpgradeRun), a quorum loss and its recovery on one or three
// hosts with its phases (QuorumLossRun, RecoveryRun), and the steward
// commands' progress lines with their times (TimedRun, LogLines). The
// operator's benchmarks (test/bench/operator) run the same on hosts as
// their baseline in the same run, and measure pods with the same writer.
package hostsbench

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// Fill writes about mb megabytes in 10 KB values, 10 per transaction.
func Fill(b *testing.B, cli *clientv3.Client, mb int) {
	val := strings.Repeat("v", 10<<10)
	FillWith(b, cli, mb, func(int) string { return val })
}

// FillRandom is Fill with values of random bytes in base64 (10,000
// characters; seeded by the key, so the same keyspace every time), which
// zstd does not shrink to nothing as it does Fill's: what a backup of the
// data costs is then that of real data.
func FillRandom(b *testing.B, cli *clientv3.Client, mb int) {
	FillWith(b, cli, mb, func(i int) string {
		raw := make([]byte, 7500)
		rand.New(rand.NewSource(int64(i))).Read(raw)
		return base64.StdEncoding.EncodeToString(raw)
	})
}

// FillWith writes about mb megabytes as keys data/NNNNNN, value(i) for key
// i, 10 per transaction, from eight concurrent clients.
func FillWith(b *testing.B, cli *clientv3.Client, mb int, value func(i int) string) {
	n := mb * 100 / 10 // transactions of 10 puts of 10 KB
	var wg sync.WaitGroup
	work := make(chan int)
	var mu sync.Mutex
	var firstErr error
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range work {
				ops := make([]clientv3.Op, 10)
				for j := range ops {
					ops[j] = clientv3.OpPut(fmt.Sprintf("data/%06d", t*10+j), value(t*10+j))
				}
				if _, err := cli.Txn(b.Context()).Then(ops...).Commit(); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}
		}()
	}
	for t := 0; t < n; t++ {
		work <- t
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}

// MeasureWrites starts a client writing 1 KB values one after the other
// (over a thousand keys, so the database does not grow) until the writer
// is stopped; WriteLatencies summarises what it recorded.
func MeasureWrites(b *testing.B, cli *clientv3.Client) *workload.Writer {
	return workload.Start(b, cli, workload.Options{Prefix: "lat", Wrap: 1000, Value: strings.Repeat("w", 1024), Timeout: 10 * time.Second})
}

// WriteLatencies stops w and returns the latency quantiles of its
// acknowledged writes, how many there were and how many failed.
func WriteLatencies(w *workload.Writer) (p50, p99, max time.Duration, n, errs int) {
	return latencies(w.Stop())
}

// latencies are the latency quantiles of r's acknowledged writes, how
// many there were and how many failed.
func latencies(r *workload.Result) (p50, p99, max time.Duration, n, errs int) {
	d := r.Latencies()
	if len(d) == 0 {
		return 0, 0, 0, 0, len(r.Failed)
	}
	q := func(p float64) time.Duration { return d[int(float64(len(d)-1)*p)] }
	return q(0.5), q(0.99), d[len(d)-1], len(d), len(r.Failed)
}

// MS is d in milliseconds, for a metric.
func MS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// TimedLine is a line of progress and when it came.
type TimedLine struct {
	At   time.Time
	Text string
}

// LineAt returns when the first line containing s came.
func LineAt(b *testing.B, lines []TimedLine, s string) time.Time {
	for _, l := range lines {
		if strings.Contains(l.Text, s) {
			return l.At
		}
	}
	b.Fatalf("no progress line says %q", s)
	return time.Time{}
}

// TimedRun runs steward and logs each line of its progress (stderr) with
// the time since the command started, to see where a plan spends its time.
func TimedRun(b *testing.B, e *harness.Env, args ...string) []TimedLine {
	cmd := exec.Command(e.Bin, append(args, "--dir", e.Dir)...)
	cmd.Env = append(os.Environ(), "STEWARD_DIR=")
	out, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var lines []TimedLine
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines = append(lines, TimedLine{time.Now(), sc.Text()})
	}
	err = cmd.Wait()
	for _, l := range lines {
		fmt.Fprintf(os.Stderr, "  %6.2f s  %s\n", l.At.Sub(start).Seconds(), l.Text)
	}
	if err != nil {
		b.Fatalf("steward %v: %v (its output is above)", args, err)
	}
	return lines
}

// RecoveryRun is one quorum loss and its recovery, times from the loss.
type RecoveryRun struct {
	dbMB, fillMB float64
	fill         time.Duration
	action       string
	detect       time.Duration // loss -> the recovery starts
	recovery     time.Duration // the recovery, start to end (view to rejoin)
	view         time.Duration // the recovery's own status read
	inspect      time.Duration // members stopped, data dirs inspected
	seed         time.Duration // the seed rebuilt, started, healthy
	snapshot     time.Duration // the fresh full snapshot of the seed
	restore      time.Duration // seed + snapshot
	rejoin       time.Duration // the others added -> recovery done
	healthy      time.Duration // recovery done -> status healthy, 3 voters
	total        time.Duration // loss -> status healthy, 3 voters
}

// Total is from the loss to status showing three healthy voters.
func (r RecoveryRun) Total() time.Duration { return r.total }

// Report reports the run's figures as metrics of b, each name prefixed by
// prefix ("" in BenchmarkHostsQuorumLossRecovery: total-s, detect-s...).
func (r RecoveryRun) Report(b *testing.B, prefix string) {
	b.ReportMetric(r.dbMB, prefix+"db-MB")
	b.ReportMetric(r.total.Seconds(), prefix+"total-s")
	b.ReportMetric(r.detect.Seconds(), prefix+"detect-s")
	b.ReportMetric(r.recovery.Seconds(), prefix+"recovery-s")
	b.ReportMetric(r.view.Seconds(), prefix+"view-s")
	b.ReportMetric(r.inspect.Seconds(), prefix+"inspect-s")
	b.ReportMetric(r.seed.Seconds(), prefix+"seed-s")
	b.ReportMetric(r.restore.Seconds(), prefix+"restore-s")
	b.ReportMetric(r.snapshot.Seconds(), prefix+"snapshot-s")
	b.ReportMetric(r.rejoin.Seconds(), prefix+"rejoin-s")
	b.ReportMetric(r.healthy.Seconds(), prefix+"healthy-s")
	rd := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	b.Logf("%s: %.0f MB written in %s (%.0f MB/s), database %.0f MB; recovered by %s in %s: detect %s, recovery %s (view %s, inspect %s, restore %s (seed %s, fresh full snapshot %s), rejoin %s), healthy %s",
		b.Name(), r.fillMB, rd(r.fill), r.fillMB/r.fill.Seconds(), r.dbMB, r.action, rd(r.total), rd(r.detect), rd(r.recovery),
		rd(r.view), rd(r.inspect), rd(r.restore), rd(r.seed), rd(r.snapshot), rd(r.rejoin), rd(r.healthy))
}

// QuorumLoss is the shape of one QuorumLossRun.
type QuorumLoss struct {
	Side    string // "one-host" or "three-hosts"
	Mode    string // "recover" (the command) or "auto" (recovery.mode auto)
	Version string // etcd's
	MB      int    // the data written before the loss (FillRandom)
	// GraceSeconds is auto's recovery.gracePeriodSeconds: 5 when 0.
	GraceSeconds int
}

// QuorumLossRun builds a cluster of three members of q.Version on q.Side,
// backups in S3, recovery.mode auto when q.Mode is "auto"; fills it with
// q.MB MB, waits for the backups to hold every revision, loses two
// members' data dirs and times the recovery until status shows three
// healthy voters and the keyspace is the one from before the loss.
func QuorumLossRun(b *testing.B, q QuorumLoss) RecoveryRun {
	side, mode, v, mb := q.Side, q.Mode, q.Version, q.MB
	grace := q.GraceSeconds
	if grace == 0 {
		grace = 5
	}
	var e *harness.Env
	var hs *harness.Hosts
	edit := func(s *spec.Cluster) {
		s.Etcd.QuotaBackendBytes = 8 << 30
		s.Backup.Continuous = true
		if mode == "auto" {
			s.Recovery = spec.Recovery{Mode: "auto", GracePeriodSeconds: grace}
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

	var r RecoveryRun
	cli := e.Client()
	start := time.Now()
	FillRandom(b, cli, mb)
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
		lines := TimedRun(b, e, "recover")
		done = time.Now()
		r.action = "recover"
		r.recovery = done.Sub(started)
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
		r.recovery = a.Finished.Sub(a.Started)
		lines := LogLines(b, logPath, "component=recovery", a.Started, a.Finished)
		for _, l := range lines {
			fmt.Fprintf(os.Stderr, "  %6.2f s  %s\n", l.At.Sub(a.Started).Seconds(), l.Text)
		}
		r.phases(b, lines, a.Started, a.Finished)
	}
	// What the seed's agent did to its member meanwhile (started, stopped,
	// drained), to split the seed's isolated runs into start and stop.
	agentLog := filepath.Join(e.Dir, "logs", "agent.log")
	if hs != nil {
		agentLog = filepath.Join(hs.Host("h3").Dir, "logs", "agent-h3.log")
	}
	for _, l := range LogLines(b, agentLog, "member=etcd-3", lostAt, done) {
		b.Logf("agent of etcd-3: %6.2f s after the loss: %s", l.At.Sub(lostAt).Seconds(), l.Text)
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
func (r *RecoveryRun) phases(b *testing.B, lines []TimedLine, start, end time.Time) {
	marks := []string{"quorum lost (", "members have valid data", "streaming a snapshot from", "fresh full snapshot"}
	at := make([]time.Time, 0, len(marks)+1)
	i := 0
	for _, l := range lines {
		if i < len(marks) && strings.Contains(l.Text, marks[i]) {
			at = append(at, l.At)
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

// LogLines returns the messages of the log at path whose line contains
// filter (the automatic recovery's: component=recovery), logged from start
// to end, with their times.
func LogLines(b *testing.B, path, filter string, start, end time.Time) []TimedLine {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var out []TimedLine
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
		out = append(out, TimedLine{at, msg})
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return out
}

// UpgradeRun is what one client (MeasureWrites) saw during one or more
// plans: `steward upgrade apply`, `steward rollback`, or the same done by
// the operator in pods.
type UpgradeRun struct {
	op            string        // what ran, in the metric of its time: OP-s
	took          time.Duration // the plans, from the first command to the last's end
	writes        int
	p50, p99, max time.Duration // latencies of acknowledged writes
	gap           time.Duration // longest time between two acknowledgements
	errs          int           // writes that failed
	kinds         map[string]int
	messages      map[string]int // failed attempts by error message
}

// PlanStep is one command of TimedPlans (its arguments), and the version
// every member is on once it has run.
type PlanStep struct {
	Args []string
	To   string
}

// TimedUpgrade upgrades e's cluster to `to` while MeasureWrites writes
// through every member (the plan's progress lines are printed with their
// times, TimedRun), and checks that every member ends healthy on `to`.
func TimedUpgrade(b *testing.B, e *harness.Env, to string) UpgradeRun {
	return TimedPlans(b, e, "upgrade", PlanStep{Args: []string{"upgrade", "apply", "--to", to}, To: to})
}

// TimedPlans is TimedUpgrade for the commands of steps, one after the
// other under the same writer (each but the last followed by a wait for
// every member healthy on its version): an upgrade and its rollback. op
// names the run in its metrics.
func TimedPlans(b *testing.B, e *harness.Env, op string, steps ...PlanStep) UpgradeRun {
	cli := e.Client()
	defer cli.Close()
	l := MeasureWrites(b, cli)
	start := time.Now()
	var lines []TimedLine
	for i, st := range steps {
		lines = append(lines, TimedRun(b, e, st.Args...)...)
		if i < len(steps)-1 {
			waitVersion(e, st.To)
		}
	}
	took := time.Since(start)
	res := l.Stop()
	// Where in the plan each failed write began: the last progress line
	// before it.
	for _, w := range res.Failed {
		step := "(before the first progress line)"
		for _, pl := range lines {
			if pl.At.After(w.Start) {
				break
			}
			step = pl.Text
		}
		b.Logf("failed write %d: began %.2f s into the %s, failed after %.2f s: %v; last progress line: %s",
			w.Index, w.Start.Sub(start).Seconds(), op, w.End.Sub(w.Start).Seconds(), w.Err, step)
	}
	waitVersion(e, steps[len(steps)-1].To)
	return Summarize(op, took, res)
}

// waitVersion waits until every member of e is healthy on version to.
func waitVersion(e *harness.Env, to string) {
	e.WaitStatus(time.Minute, "every member healthy on "+to, func(st *status.Status) bool {
		for _, m := range st.Members {
			if m.Version != to {
				return false
			}
		}
		return harness.Healthy(st)
	})
}

// Summarize is what the writer's record res says of op, which took took:
// latencies, failed writes by kind (ErrorKind), the longest gap.
func Summarize(op string, took time.Duration, res *workload.Result) UpgradeRun {
	p50, p99, stall, n, errs := latencies(res)
	r := UpgradeRun{op: op, took: took, writes: n, p50: p50, p99: p99, max: stall, gap: res.LongestGap(),
		errs: errs, kinds: map[string]int{}, messages: res.AttemptErrors}
	for _, w := range res.Failed {
		r.kinds[ErrorKind(w.Err)]++
	}
	return r
}

// Report reports the run as metrics named SIDE-...: SIDE-OP-s (the
// plans' time), SIDE-writes, SIDE-errors and by kind, SIDE-p50-ms,
// SIDE-p99-ms, SIDE-max-stall-ms (the longest acknowledged write),
// SIDE-longest-gap-ms.
func (r UpgradeRun) Report(b *testing.B, side string) {
	b.ReportMetric(r.took.Seconds(), side+"-"+r.op+"-s")
	b.ReportMetric(float64(r.writes), side+"-writes")
	b.ReportMetric(float64(r.errs), side+"-errors")
	for _, k := range ErrorKinds {
		b.ReportMetric(float64(r.kinds[k.kind]), side+"-errors-"+k.kind)
	}
	b.ReportMetric(float64(r.kinds["other"]), side+"-errors-other")
	b.ReportMetric(MS(r.p50), side+"-p50-ms")
	b.ReportMetric(MS(r.p99), side+"-p99-ms")
	b.ReportMetric(MS(r.max), side+"-max-stall-ms")
	b.ReportMetric(MS(r.gap), side+"-longest-gap-ms")
	b.Logf("%s: %s in %s: %d writes, %d errors %v, p50 %.1f ms, p99 %.1f ms, longest write %.0f ms, longest gap between acknowledgements %.0f ms",
		side, r.op, r.took.Round(100*time.Millisecond), r.writes, r.errs, r.kinds, MS(r.p50), MS(r.p99), MS(r.max), MS(r.gap))
	for _, m := range slices.Sorted(maps.Keys(r.messages)) {
		b.Logf("%s:   %d x %q", side, r.messages[m], m)
	}
}

// ErrorKinds sorts a client's errors by what their message says; the
// first kind whose pattern the message contains wins, "other" takes the
// rest.
var ErrorKinds = []struct {
	kind     string
	patterns []string
}{
	{"proposal-dropped", []string{"raft proposal dropped"}},
	{"leader-changed", []string{"leader changed"}},
	{"no-leader", []string{"no leader"}},
	// etcd's own timeouts ("etcdserver: request timed out, possibly due
	// to ..."), within the client's deadline.
	{"server-timeout", []string{"request timed out"}},
	// The client's 10 s per write.
	{"deadline-exceeded", []string{"deadline exceeded", "DeadlineExceeded"}},
	// The rest of gRPC's Unavailable: a connection refused or closing, a
	// member stopping.
	{"unavailable", []string{"Unavailable", "server stopped", "connection refused", "connection closed", "transport is closing"}},
}

// ErrorKind is the kind of ErrorKinds err's message names, or "other".
func ErrorKind(err error) string {
	s := err.Error()
	for _, k := range ErrorKinds {
		for _, p := range k.patterns {
			if strings.Contains(s, p) {
				return k.kind
			}
		}
	}
	return "other"
}

// Loadavg is the machine's load average (1, 5, 15 minutes), for the log:
// other work may share the two cores.
func Loadavg() string {
	s, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return err.Error()
	}
	f := strings.Fields(string(s))
	if len(f) < 3 {
		return strings.TrimSpace(string(s))
	}
	return strings.Join(f[:3], " ")
}
