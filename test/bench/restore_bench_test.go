package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/test/harness"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkRestore: restore of a database of STEWARD_BENCH_RESTORE_MB
// (default 1024) plus STEWARD_BENCH_RESTORE_EVENTS delta events (default
// 1,000,000, one put per revision). Steward's restore (deltas written
// straight into the snapshot database, then the member's data dir) against the
// method etcd-backup-restore uses, in the same run: restore the full
// snapshot, start etcd, and replay each revision as one transaction through
// the client. Also reports Steward's peak memory (max RSS of the restore
// process). STEWARD_BENCH_RESTORE_BASELINE=0 skips the baseline (which
// replays about 600 transactions per second here: 28 minutes for a million).
// The same restore runs again inside a memory cgroup limited to
// STEWARD_BENCH_RESTORE_CGROUP_MB (default 512); cgroup-ratio is its time
// over the unconstrained one (issue 15: at most 1.5). Both runs log their
// stages, stamped.
func BenchmarkRestore(b *testing.B) {
	mb := envInt("STEWARD_BENCH_RESTORE_MB", 1024)
	events := envInt("STEWARD_BENCH_RESTORE_EVENTS", 1_000_000)
	for i := 0; i < b.N; i++ {
		e, full, store := backedUpStopped(b, mb)
		// Synthetic deltas after the full snapshot: one put per revision.
		value := bytes.Repeat([]byte("d"), 100)
		rev := full.EndRevision
		for done := 0; done < events; {
			var buf bytes.Buffer
			w := backup.NewDeltaWriter(&buf)
			start := rev + 1
			n := min(10000, events-done)
			for j := 0; j < n; j++ {
				rev++
				k := fmt.Sprintf("delta/%07d", (done+j)%200000)
				kv := mvccpb.KeyValue{Key: []byte(k), Value: value, CreateRevision: rev, ModRevision: rev, Version: 1}
				if err := w.Event('P', 0, &kv); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
			auth, err := backup.LoadAuthKey(filepath.Join(e.Dir, "pki", pki.BackupAuthKey))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := backup.PutDelta(b.Context(), store, nil, auth, backup.DeltaInfo{
				ClusterID: full.ClusterID, Start: start, End: rev, Events: n, Now: time.Now(),
			}, buf.Bytes()); err != nil {
				b.Fatal(err)
			}
			done += n
		}
		last := rev

		// Steward's restore.
		start := time.Now()
		cmd := exec.Command(e.Bin, "restore", "--force", "--dir", e.Dir)
		// Stamped as the bounded run below is, to compare stage by stage.
		out := &stampWriter{start: start}
		cmd.Stdout, cmd.Stderr = out, out
		// Peak anonymous memory (heap and stacks), sampled: file pages of
		// the database's mmap are page cache and grow with the database.
		anonPeak, maxRSS := runSampled(b, cmd, 5*time.Millisecond, "restore", &out.buf)
		stewardDur := time.Since(start)
		b.Logf("restore, unconstrained:\n%s", out.buf.String())
		// The same restore again inside a memory cgroup limited to 512 MB
		// (cgroup v1, when this machine lets us make one): the page cache
		// the restore reads and writes is charged to the group, so this
		// shows whether it completes within that memory, not just whether
		// its own allocations are small.
		cg := boundedRestore(b, e, int64(envInt("STEWARD_BENCH_RESTORE_CGROUP_MB", 512))<<20)
		e.MustRun("up")
		r, err := e.Client().Get(b.Context(), "delta/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || r.Header.Revision <= last {
			b.Fatalf("restored cluster at revision %v (want above %d): %v", r, last, err)
		}
		e.MustRun("down")

		if os.Getenv("STEWARD_BENCH_RESTORE_BASELINE") == "0" {
			// Steward alone: to show peak memory against chain length.
			b.ReportMetric(float64(events), "delta-events")
			b.ReportMetric(stewardDur.Seconds(), "steward-restore-s")
			b.ReportMetric(float64(maxRSS)/1024, "steward-peak-rss-MB")
			b.ReportMetric(float64(anonPeak)/1024, "steward-peak-anon-MB")
			cg.report(b, stewardDur)
			b.Logf("%d MB + %d events: steward restore %s (peak RSS %d MB, anonymous %d MB); %s; baseline skipped", mb, events, stewardDur.Round(time.Millisecond), maxRSS/1024, anonPeak/1024, cg)
			continue
		}
		// Baseline: full snapshot restore, start etcd, one transaction per revision.
		start = time.Now()
		e.MustRun("restore", "--force", "--to-revision", fmt.Sprint(full.EndRevision), "--bump-revision", "1")
		e.MustRun("up")
		bcli := e.Client()
		for r := int64(0); r < int64(events); r++ {
			k := fmt.Sprintf("delta/%07d", r%200000)
			if _, err := bcli.Txn(b.Context()).Then(clientv3.OpPut(k, string(value))).Commit(); err != nil {
				b.Fatal(err)
			}
		}
		baseDur := time.Since(start)

		b.ReportMetric(float64(mb), "db-MB")
		b.ReportMetric(float64(events), "delta-events")
		b.ReportMetric(stewardDur.Seconds(), "steward-restore-s")
		b.ReportMetric(baseDur.Seconds(), "replay-baseline-s")
		b.ReportMetric(baseDur.Seconds()/stewardDur.Seconds(), "speedup")
		b.ReportMetric(float64(maxRSS)/1024, "steward-peak-rss-MB")
		b.ReportMetric(float64(anonPeak)/1024, "steward-peak-anon-MB")
		cg.report(b, stewardDur)
		b.Logf("%d MB + %d events: steward restore %s (peak RSS %d MB, anonymous %d MB), replay baseline %s: %.1fx; %s",
			mb, events, stewardDur.Round(time.Millisecond), maxRSS/1024, anonPeak/1024, baseDur.Round(time.Millisecond), baseDur.Seconds()/stewardDur.Seconds(), cg)
	}
}

// cgroupRun is the outcome of boundedRestore.
type cgroupRun struct {
	limit    int64
	ran      bool   // false: no writable memory cgroup here
	why      string // why it did not run
	dur      time.Duration
	maxUsage int64 // peak charged to the group: page cache included
	failcnt  int64 // times the group hit its limit (and reclaimed)
}

func (c cgroupRun) String() string {
	if !c.ran {
		return "bounded run skipped: " + c.why
	}
	return fmt.Sprintf("in a %d MB memory cgroup: %s, peak charged %d MB, limit hit %d times",
		c.limit>>20, c.dur.Round(time.Millisecond), c.maxUsage>>20, c.failcnt)
}

// report reports the bounded run, and its time against the unconstrained
// run's (the goal: at most 1.5).
func (c cgroupRun) report(b *testing.B, unconstrained time.Duration) {
	if c.ran {
		b.ReportMetric(c.dur.Seconds(), "cgroup-restore-s")
		b.ReportMetric(float64(c.maxUsage>>20), "cgroup-peak-charged-MB")
		b.ReportMetric(c.dur.Seconds()/unconstrained.Seconds(), "cgroup-ratio")
	}
}

// boundedRestore runs `steward restore --force` of e inside a new memory
// cgroup limited to limit bytes: a cgroup v1 memory group when this machine
// mounts the v1 memory controller, else a cgroup v2 group (memory.max) when
// the unified hierarchy offers the memory controller. The restore must
// succeed (an OOM kill fails the benchmark).
func boundedRestore(b *testing.B, e *harness.Env, limit int64) cgroupRun {
	run := cgroupRun{limit: limit}
	g, err := newMemGroup(fmt.Sprintf("steward-bench-%d", os.Getpid()), limit)
	if err != nil {
		run.why = err.Error()
		return run
	}
	defer g.remove()
	// The shell joins the group, then becomes steward: nothing of the
	// restore runs outside it.
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$1/cgroup.procs" && shift && exec "$@"`,
		"sh", g.dir, e.Bin, "restore", "--force", "--dir", e.Dir)
	start := time.Now()
	// Each progress line is stamped with its time since the start, to see
	// which stage the limit slows.
	out := &stampWriter{start: start}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		b.Fatalf("restore in a %d MB memory cgroup: %v\n%s", limit>>20, err, out.buf.String())
	}
	run.dur, run.ran = time.Since(start), true
	b.Logf("restore in a %d MB memory cgroup:\n%s", limit>>20, out.buf.String())
	run.maxUsage, run.failcnt = g.peak(), g.limitHits()
	return run
}

// memGroup is a memory cgroup made for one bounded run.
type memGroup struct {
	dir string
	v2  bool
}

// newMemGroup makes the cgroup name limited to limit bytes, v1 if this
// machine has the v1 memory controller, else v2.
func newMemGroup(name string, limit int64) (*memGroup, error) {
	v1 := "/sys/fs/cgroup/memory"
	if fi, err := os.Stat(v1); err == nil && fi.IsDir() {
		g := &memGroup{dir: filepath.Join(v1, name)}
		if err := os.Mkdir(g.dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(g.dir, "memory.limit_in_bytes"), []byte(fmt.Sprint(limit)), 0o644); err != nil {
			g.remove()
			return nil, err
		}
		return g, nil
	}
	root := "/sys/fs/cgroup"
	ctl, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil || !slices.Contains(strings.Fields(string(ctl)), "memory") {
		return nil, fmt.Errorf("no cgroup v1 memory controller and no cgroup v2 one at %s (%v)", root, err)
	}
	// Children get the memory controller only if the parent passes it on.
	_ = os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+memory"), 0o644)
	g := &memGroup{dir: filepath.Join(root, name), v2: true}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return nil, err
	}
	for file, v := range map[string]string{"memory.max": fmt.Sprint(limit), "memory.swap.max": "0"} {
		if err := os.WriteFile(filepath.Join(g.dir, file), []byte(v), 0o644); err != nil && file == "memory.max" {
			g.remove()
			return nil, err
		}
	}
	return g, nil
}

func (g *memGroup) read(name string) int64 {
	v, _ := os.ReadFile(filepath.Join(g.dir, name))
	n, _ := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
	return n
}

// peak is the most memory charged to the group, page cache included
// (memory.peak needs Linux 5.19 under v2; 0 before).
func (g *memGroup) peak() int64 {
	if g.v2 {
		return g.read("memory.peak")
	}
	return g.read("memory.max_usage_in_bytes")
}

// limitHits is how many times the group hit its limit and reclaimed
// (v2: memory.events "max").
func (g *memGroup) limitHits() int64 {
	if !g.v2 {
		return g.read("memory.failcnt")
	}
	ev, _ := os.ReadFile(filepath.Join(g.dir, "memory.events"))
	for _, line := range strings.Split(string(ev), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "max" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// remove empties (v1) and removes the group; its processes have exited.
func (g *memGroup) remove() {
	if !g.v2 {
		_ = os.WriteFile(filepath.Join(g.dir, "memory.force_empty"), []byte("0"), 0o644)
	}
	_ = os.Remove(g.dir)
}

// stampWriter prefixes each line written to it with the time since start.
type stampWriter struct {
	start time.Time
	buf   bytes.Buffer
	mid   bool // inside a line
}

func (w *stampWriter) Write(p []byte) (int, error) {
	for _, c := range p {
		if !w.mid {
			fmt.Fprintf(&w.buf, "%8.1fs  ", time.Since(w.start).Seconds())
		}
		w.buf.WriteByte(c)
		w.mid = c != '\n'
	}
	return len(p), nil
}

// runSampled starts cmd (its output already directed to out), samples the
// process's anonymous resident memory every interval until it exits, and
// fails the benchmark with out when it exits non-zero. It returns the peak
// anonymous memory and the maximum resident set, both in KiB.
func runSampled(b *testing.B, cmd *exec.Cmd, interval time.Duration, what string, out *bytes.Buffer) (anonPeak, maxRSS int64) {
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for {
		select {
		case err := <-waited:
			if err != nil {
				b.Fatalf("%s: %v\n%s", what, err, out.String())
			}
			return anonPeak, cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
		case <-time.After(interval):
			anonPeak = max(anonPeak, rssAnonKiB(cmd.Process.Pid))
		}
	}
}

// rssAnonKiB reads RssAnon from /proc/PID/status (0 when gone).
func rssAnonKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "RssAnon:" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}
