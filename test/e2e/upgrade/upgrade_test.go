package upgrade_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// TestRollingUpgradeAndRollback: three members go 3.5 -> 3.6 -> 3.7 in one
// plan and back to 3.5 with `steward rollback`, while a client writes
// unique keys throughout: no acknowledged write is lost, every member ends
// on the version it started with, and both plans are recorded.
//
// etcd's leaders here check for a complete downgrade only once an hour
// (--downgrade-check-time), so each hop of the rollback ends etcd's
// downgrade itself: without that, the 3.7 -> 3.6 hop would wait for it
// until its timeout, and the member replaced right after the rollback
// would be refused by its peers ("incompatible with current running
// cluster": a 3.5 member may not join a cluster whose downgrade is
// enabled), as it was once in CI when etcd's own check came late.
func TestRollingUpgradeAndRollback(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	e := harness.New(t)
	upWithoutDowngradeCheck(e, vs[0])
	w := harness.UnderWrites(t, e.Client(), workload.Options{Prefix: "upgrade"}, harness.Expect{})

	var up plan.Plan
	var mid int
	if !t.Run("upgrade "+vs[0]+" to "+vs[2], func(t *testing.T) {
		e := e.For(t)
		e.MustRun("upgrade", "apply", "--to", vs[2])
		st := e.WaitStatus(time.Minute, "every member on "+vs[2], harness.Healthy)
		harness.RequireVersion(t, st, vs[2], "after the upgrade")
		if st.Cluster.Version != harness.Minor(vs[2])+".0" || e.Spec().Version != vs[2] {
			t.Fatalf("cluster version %s, spec version %s; want %s.0 and %s", st.Cluster.Version, e.Spec().Version, harness.Minor(vs[2]), vs[2])
		}
		up = harness.LatestPlan(t, e)
		v := harness.UpgradePayload(t, up)
		if up.State != plan.Done || up.Kind != plan.KindUpgrade || v.From != vs[0] || v.To != vs[2] {
			t.Fatalf("upgrade plan: %s %s %s->%s", up.State, up.Kind, v.From, v.To)
		}
		if c := harness.Cond(st, status.CondUpgradeInProgress); c.Status != "False" {
			t.Errorf("UpgradeInProgress after the plan: %+v", c)
		}
		mid = w.Acked()
	}) {
		return
	}
	if !t.Run("rollback to "+vs[0], func(t *testing.T) {
		e := e.For(t)
		e.MustRun("rollback")
		// The rollback ended etcd's downgrade (etcd's own check would
		// come after an hour): every member says so to its peers, once it
		// has applied the cancel (3.5's step ends when the leader
		// answers it; a follower applies it a moment later).
		harness.Eventually(t, 10*time.Second, 100*time.Millisecond, "every member to say its downgrade is over", func() error {
			for _, m := range e.Spec().Members {
				if got := peerGet(t, e, m.PeerURL+"/downgrade/enabled"); got != "false" {
					return fmt.Errorf("%s answers %q to /downgrade/enabled after the rollback, want false", m.Name, got)
				}
			}
			return nil
		})
		st := e.WaitStatus(time.Minute, "every member back on "+vs[0], harness.Healthy)
		harness.RequireVersion(t, st, vs[0], "after the rollback")
		if e.Spec().Version != vs[0] {
			t.Fatalf("spec version %s after rollback", e.Spec().Version)
		}
		res := w.Finish(t)
		if len(res.Acked) <= mid || mid == 0 {
			t.Fatalf("the writer made no progress (%d acknowledged before the rollback, %d in all)", mid, len(res.Acked))
		}
		rb := harness.LatestPlan(t, e)
		if rb.Kind != plan.KindRollback || rb.State != plan.Done || rb.Of != up.ID {
			t.Fatalf("rollback plan: %s %s of %s", rb.Kind, rb.State, rb.Of)
		}
	}) {
		return
	}
	t.Run("member replace right after the rollback", func(t *testing.T) {
		e := e.For(t)
		victim := e.Spec().Members[1].Name
		e.MustRun("member", "replace", victim)
		st := e.WaitStatus(time.Minute, "replaced member healthy", harness.Healthy)
		harness.RequireVersion(t, st, vs[0], "after the replace")
		if st.Cluster.VotingMembers != 3 {
			t.Fatalf("%d voting members after the replace, want 3", st.Cluster.VotingMembers)
		}
	})
}

// upWithoutDowngradeCheck starts three members of version whose etcd
// checks for a complete downgrade only once an hour
// (--downgrade-check-time): within a test, nothing but Steward ends one.
func upWithoutDowngradeCheck(e *harness.Env, version string) {
	e.WriteSpec(3, version, func(s *spec.Cluster) {
		s.Etcd.ExtraFlags = map[string]string{"experimental-downgrade-check-time": "1h"}
	})
	e.MustRun("up")
}

// peerGet asks a member's peer URL what its peers would (with the peer
// certificate: the peer listener requires it) and returns the body.
func peerGet(t *testing.T, e *harness.Env, url string) string {
	t.Helper()
	pki := filepath.Join(e.Dir, "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "peer.crt"), filepath.Join(pki, "peer.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots},
	}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s (%v)", url, resp.Status, b, err)
	}
	return strings.TrimSpace(string(b))
}

// TestUpgradeResumeAfterKill kills the steward process running a rolling
// plan (three members, 3.6 -> 3.7) with SIGKILL at crash points, before and
// after every step's action in turn; each time `steward plan resume` takes
// over, and the cluster reaches the target with every acknowledged write.
func TestUpgradeResumeAfterKill(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	e, w := harness.UpUnderWrites(t, 3, vs[1], workload.Options{Prefix: "resume"}, harness.Expect{})

	harness.KillAtEveryStep(t, e, "upgrade", "apply", "--to", vs[2])
	st := e.WaitStatus(time.Minute, "a healthy cluster on "+vs[2], harness.Healthy)
	harness.RequireVersion(t, st, vs[2], "after the kills and resumes")
	w.Finish(t)
}

// TestRestoreUpgradeResumeAfterKill: the restore strategy on three members
// (3.6 -> 3.7), with the steward process killed with SIGKILL before and
// after every step's action in turn (the replace step too, with members
// stopped or running on private ports) and the plan resumed each time: the
// cluster reaches the target with every acknowledged write.
func TestRestoreUpgradeResumeAfterKill(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	e, w := harness.UpUnderWrites(t, 3, vs[1], workload.Options{Prefix: "resume"}, harness.Expect{})
	harness.KillAtEveryStep(t, e, "upgrade", "apply", "--to", vs[2], "--strategy", "restore")
	st := e.WaitStatus(time.Minute, "a healthy cluster on "+vs[2], harness.Healthy)
	harness.RequireVersion(t, st, vs[2], "after the kills and resumes")
	w.Finish(t)
}

// TestOfflineUpgradeResumeAfterKill: the offline strategy on one member
// (3.5 -> 3.7 through 3.6 on a private client port), killed before and
// after every step's action in turn and resumed: the member reaches the
// target with every acknowledged write, and never stays on its private
// port.
func TestOfflineUpgradeResumeAfterKill(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	e, w := harness.UpUnderWrites(t, 1, vs[0], workload.Options{Prefix: "resume"}, harness.Expect{})
	harness.KillAtEveryStep(t, e, "upgrade", "apply", "--to", vs[2])
	st := e.WaitStatus(time.Minute, "the member healthy on "+vs[2], harness.Healthy)
	harness.RequireVersion(t, st, vs[2], "after the kills and resumes")
	p := harness.LatestPlan(t, e)
	v := harness.UpgradePayload(t, p)
	if v.Strategy != "offline" {
		t.Fatalf("strategy %s, want offline", v.Strategy)
	}
	w.Finish(t)
}

// TestHealthGateFailsThenResumes: a member that goes down during the plan
// makes the next step's health gate fail: the plan stops in the failed
// state with the reason, status says so, and resume finishes once the
// member is back. A member killed with SIGKILL while the plan swaps it is
// restarted by its agent and the step still converges.
func TestHealthGateFailsThenResumes(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	e := harness.New(t)
	e.Up(3, vs[0])
	// The plan swaps the two followers, then the leader: the leader is
	// stopped once the first follower is done, so the second follower's
	// health gate fails.
	victim := e.Status().Cluster.Leader
	if !t.Run("the health gate fails with a member stopped", func(t *testing.T) {
		e := e.For(t)
		cmd := exec.Command(e.Bin, "upgrade", "apply", "--to", vs[1], "--health-timeout", "15s", "--dir", e.Dir)
		var out strings.Builder
		cmd.Stderr = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		harness.Eventually(t, 3*time.Minute, 50*time.Millisecond, "the first member step (not "+victim+") to finish", func() error {
			p, err := harness.ReadPlan(e)
			if err != nil {
				return err
			}
			for _, s := range p.Steps {
				if s.Kind == "member" {
					if s.State == plan.Done && s.Member != victim {
						return nil
					}
					break
				}
			}
			return errors.New(harness.StepStates(p))
		})
		// --force: the follower being swapped may be down at this moment.
		e.MustRun("member", "stop", "--force", victim)
		if err := <-exited; err == nil {
			t.Fatalf("upgrade apply succeeded with %s stopped", victim)
		}
		if !strings.Contains(out.String(), "plan resume") {
			t.Errorf("apply's error does not say how to go on: %s", out.String())
		}
		p := harness.LatestPlan(t, e)
		cur := p.Current()
		if p.State != plan.Failed || cur == nil || cur.State != plan.Failed || !strings.Contains(cur.Error, victim) {
			t.Fatalf("plan %s, current step %+v; want failed naming %s", p.State, cur, victim)
		}
		// The condition names the commands that end it (steward status
		// adds them).
		if c := harness.Cond(e.Status(), status.CondUpgradeInProgress); c.Status != "True" || c.Reason != "Failed" ||
			!strings.HasSuffix(c.Message, "; fix the cause, then `steward plan resume` or `steward plan abort`") {
			t.Errorf("UpgradeInProgress while failed: %+v", c)
		}
		// A new plan is refused while this one waits.
		if msg := e.MustFail("upgrade", "apply", "--to", vs[1]); !strings.Contains(msg, "plan resume") {
			t.Errorf("second plan: %s", msg)
		}
	}) {
		return
	}
	t.Run("resume once the member is back, a swapped member killed", func(t *testing.T) {
		e := e.For(t)
		e.MustRun("member", "start", victim)
		e.WaitStatus(time.Minute, victim+" healthy again", harness.Healthy)
		pidBefore := map[string]int{}
		for _, m := range e.Status().Members {
			pidBefore[m.Name] = m.PID
		}
		// Kill the member being swapped, mid-step, as soon as its new process
		// runs: the agent restarts it and the step still converges.
		resume := exec.Command(e.Bin, "plan", "resume", "--dir", e.Dir)
		var rout strings.Builder
		resume.Stderr = &rout
		if err := resume.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = resume.Process.Kill() })
		rexited := make(chan error, 1)
		go func() { rexited <- resume.Wait() }()
		killedMember := ""
		// A member step takes about a second (a drained stop, a start, the
		// health gate): poll at 10 ms, reading the agent's pid file rather
		// than a whole status.
		harness.Eventually(t, 3*time.Minute, 10*time.Millisecond, "a member step to run after the resume", func() error {
			p, err := harness.ReadPlan(e)
			if err != nil {
				return err
			}
			c := p.Current()
			if c == nil || c.Kind != "member" || c.State != plan.Running {
				return errors.New(harness.StepStates(p))
			}
			b, _ := os.ReadFile(filepath.Join(e.Dir, "run", c.Member+".pid"))
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if pid <= 0 || pid == pidBefore[c.Member] {
				return fmt.Errorf("step %d swaps %s, whose new process has not started (pid %d, was %d)", c.Index, c.Member, pid, pidBefore[c.Member])
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killedMember = c.Member
			return nil
		})
		if err := <-rexited; err != nil {
			t.Fatalf("resume after fixing the cause (and killing %s mid-step): %v\n%s", killedMember, err, rout.String())
		}
		if p := harness.LatestPlan(t, e); p.State != plan.Done {
			t.Fatalf("plan %s after resume", p.State)
		}
		st := e.WaitStatus(time.Minute, "all members on "+vs[1], harness.Healthy)
		harness.RequireVersion(t, st, vs[1], "after the resume")
	})
}

// TestUpgradePreflightRefusals: each refusal names its reason and changes
// nothing.
func TestUpgradePreflightRefusals(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	e := harness.New(t)
	e.Up(3, vs[1])
	names := e.Spec().MemberNames()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"upgrade", "apply", "--to", "3.8.0"}, "etcd 3.8 is not in the version catalogue"},
		{[]string{"upgrade", "apply", "--to", "4.0.0"}, "only etcd 3.x is supported"},
		{[]string{"upgrade", "apply", "--to", vs[1]}, "already runs etcd " + vs[1]},
		{[]string{"upgrade", "apply", "--to", "3.7.1"}, "binaries: etcd 3.7.1 is not in the binary store"},
		{[]string{"upgrade", "apply", "--to", vs[2], "--strategy", "sideways"}, "unknown strategy"},
		{[]string{"upgrade", "apply", "--to", vs[2], "--strategy", "offline"}, "strategy offline is for a single member and this cluster has 3"},
		{[]string{"plan", "resume"}, "no upgrade or rollback plan"},
		{[]string{"rollback"}, "no upgrade or rollback plan"},
	} {
		if msg := e.MustFail(tc.args...); !strings.Contains(msg, tc.want) {
			t.Errorf("steward %s: %q, want it to say %q", strings.Join(tc.args, " "), msg, tc.want)
		}
	}
	// An unhealthy member: refused by the pre-flight checks, nothing
	// changed; the command names the one that shows the members.
	e.MustRun("member", "stop", names[2])
	msg := e.MustFail("upgrade", "apply", "--to", vs[2])
	if !strings.Contains(msg, "members-healthy") || !strings.Contains(msg, names[2]) || !strings.Contains(msg, "nothing was changed") ||
		!strings.Contains(msg, "; fix them first (`steward status`)") {
		t.Errorf("unhealthy member: %s", msg)
	}
	e.MustRun("member", "start", names[2])
	st := e.WaitStatus(time.Minute, "healthy again", harness.Healthy)
	harness.RequireVersion(t, st, vs[1], "after refused plans")
	if e.Spec().Version != vs[1] {
		t.Fatalf("a refused plan changed the spec version to %s", e.Spec().Version)
	}
	// A flag the target removed.
	s := e.Spec()
	s.Etcd.ExtraFlags = map[string]string{"enable-v2": "false"}
	if err := s.Save(filepath.Join(e.Dir, spec.FileName)); err != nil {
		t.Fatal(err)
	}
	if msg := e.MustFail("upgrade", "apply", "--to", vs[2]); !strings.Contains(msg, "does not accept --enable-v2") {
		t.Errorf("removed flag: %s", msg)
	}
}

// TestOfflineUpgradeOneMember: a single member goes 3.5 -> 3.7 through the
// offline strategy (the 3.6 step runs on private ports, where the writer
// cannot reach it), then back with `steward rollback` (etcd's online
// downgrade on one member). No acknowledged write is lost.
func TestOfflineUpgradeOneMember(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	e, w := harness.UpUnderWrites(t, 1, vs[0], workload.Options{Prefix: "offline"}, harness.Expect{})
	name := e.Spec().Members[0].Name

	if !t.Run("plan", func(t *testing.T) {
		e := e.For(t)
		var planned plan.Plan
		if err := json.Unmarshal([]byte(e.MustRun("upgrade", "plan", "--to", vs[2], "-o", "json")), &planned); err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, s := range planned.Steps {
			kinds = append(kinds, s.Kind+":"+s.Version)
		}
		want := []string{"preflight:" + vs[2], "backup:" + vs[0], "offline:" + vs[1], "member:" + vs[2], "cluster-version:" + vs[2]}
		v := harness.UpgradePayload(t, planned)
		if v.Strategy != "offline" || strings.Join(kinds, " ") != strings.Join(want, " ") {
			t.Fatalf("plan for one member: strategy %s, steps %v; want offline, %v", v.Strategy, kinds, want)
		}
	}) {
		return
	}
	if !t.Run("offline upgrade to "+vs[2], func(t *testing.T) {
		e := e.For(t)
		e.MustRun("upgrade", "apply", "--to", vs[2])
		st := e.WaitStatus(time.Minute, "the member on "+vs[2], harness.Healthy)
		harness.RequireVersion(t, st, vs[2], "after the offline upgrade")
		p := harness.LatestPlan(t, e)
		v := harness.UpgradePayload(t, p)
		if p.State != plan.Done || v.Strategy != "offline" {
			t.Fatalf("offline plan %s: state %s, strategy %s", p.ID, p.State, v.Strategy)
		}
		// The intermediate version ran, on a client port nobody was given.
		b, err := os.ReadFile(filepath.Join(e.Dir, "logs", name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		log := string(b)
		run := log[strings.Index(log, "etcd "+vs[1]+" at "):]
		run = run[:strings.Index(run, "etcd "+vs[2]+" at ")]
		own := e.Spec().Members[0].ClientURL
		if !strings.Contains(run, "--listen-client-urls=") || strings.Contains(run, "--listen-client-urls="+own) {
			t.Fatalf("the %s run of %s listened on its own client URL %s (or logged no URL):\n%.2000s", vs[1], name, own, run)
		}
		if e.Spec().Version != vs[2] || e.Spec().Members[0].Version != "" {
			t.Fatalf("spec after the offline upgrade: version %s, member override %q", e.Spec().Version, e.Spec().Members[0].Version)
		}
		harness.Eventually(t, time.Minute, 200*time.Millisecond, "writes after the upgrade", w.AckedAbove(0))
	}) {
		return
	}
	t.Run("rollback to "+vs[0], func(t *testing.T) {
		e := e.For(t)
		e.MustRun("rollback")
		st := e.WaitStatus(time.Minute, "the member back on "+vs[0], harness.Healthy)
		harness.RequireVersion(t, st, vs[0], "after the rollback")
		w.Finish(t) // failed writes allowed: the offline strategy stops the only member
	})
}

// TestReplaceViaRestoreUpgrade: one member goes 3.5 -> 3.7 by the restore
// strategy: stopped, restored into a fresh data dir from its own stopped
// database, run on 3.6 there on a private client port, started on 3.7. No
// acknowledged write is lost, revisions do not go backwards, and the old
// data dir is kept whole for a rollback, still on 3.5.
func TestReplaceViaRestoreUpgrade(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	testReplace(t, 1, vs[0], vs[2], "preflight backup replace offline start cluster-version")
}

// TestReplaceViaRestoreThreeMembers: the same for three members, 3.6 ->
// 3.7: every member gets a new data dir restored from the same stopped
// database, and they start together as one cluster.
func TestReplaceViaRestoreThreeMembers(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	testReplace(t, 3, vs[1], vs[2], "preflight backup replace start cluster-version")
}

func testReplace(t *testing.T, n int, from, to, steps string) {
	e, w := harness.UpUnderWrites(t, n, from, workload.Options{Prefix: "replace"}, harness.Expect{Acked: 200, Within: time.Minute})
	oldSpec := e.Spec()
	cli := w.Cli

	var p plan.Plan
	if !t.Run("upgrade by restore to "+to, func(t *testing.T) {
		e := e.For(t)
		e.MustRun("upgrade", "apply", "--to", to, "--strategy", "restore")
		st := e.WaitStatus(time.Minute, "every member on "+to, harness.Healthy)
		harness.RequireVersion(t, st, to, "after the upgrade by restore")
		p = harness.LatestPlan(t, e)
		var kinds []string
		for _, s := range p.Steps {
			kinds = append(kinds, s.Kind)
		}
		if p.State != plan.Done || strings.Join(kinds, " ") != steps {
			t.Fatalf("plan %s: state %s, steps %v", p.ID, p.State, kinds)
		}
		before := w.MaxRev()
		harness.Eventually(t, time.Minute, 100*time.Millisecond, "writes after the upgrade", w.RevAbove(before))
		res := w.Finish(t)
		r, err := cli.Get(t.Context(), "replace/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if r.Header.Revision < res.MaxRev {
			t.Fatalf("revision went backwards: %d after %d was acknowledged", r.Header.Revision, res.MaxRev)
		}
	}) {
		return
	}
	t.Run("old data dirs kept whole", func(t *testing.T) {
		e := e.For(t)
		// Each member runs on a new data dir; the old ones are whole and untouched.
		for i, m := range oldSpec.Members {
			oldDir := spec.Path(e.Dir, m.DataDir)
			newDir := spec.Path(e.Dir, e.Spec().Members[i].DataDir)
			if newDir == oldDir || !strings.HasSuffix(newDir, "-v"+to) {
				t.Fatalf("%s: data dir after the upgrade by restore: %s (was %s)", m.Name, newDir, oldDir)
			}
			if got := p.Value("old-datadir." + m.Name); got != oldDir {
				t.Fatalf("plan records old data dir %q for %s, want %q", got, m.Name, oldDir)
			}
			if f := datadir.Check(oldDir); f.State != datadir.Valid {
				t.Fatalf("old data dir: %s", f)
			}
			rec, err := os.ReadFile(oldDir + ".version")
			if err != nil || !strings.Contains(string(rec), from) {
				t.Fatalf("old data dir's version record: %s %v (want %s)", rec, err, from)
			}
			if fi, err := os.Stat(newDir); err != nil || fi.Mode().Perm() != 0o700 {
				t.Fatalf("new data dir: %v %v", fi, err)
			}
		}
	})
}

// TestRollbackByRestore: three members go 3.5 -> 3.6 (rolling), then back
// with `steward rollback --strategy restore`: fresh data dirs hold the
// backup taken before the upgrade with every later write grafted in. Writes
// made after the upgrade survive, a key deleted after the upgrade stays
// deleted (also once compacted), and revisions do not go backwards.
func TestRollbackByRestore(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	e := harness.New(t)
	e.Up(3, vs[0])
	cli := e.Client()
	if _, err := cli.Put(t.Context(), "doomed", "before the upgrade"); err != nil {
		t.Fatal(err)
	}
	w := harness.UnderWrites(t, cli, workload.Options{Prefix: "back"}, harness.Expect{})
	if !t.Run("upgrade to "+vs[1], func(t *testing.T) {
		e := e.For(t)
		e.MustRun("upgrade", "apply", "--to", vs[1])
		e.WaitStatus(time.Minute, "every member on "+vs[1], harness.Healthy)
		before := w.MaxRev()
		harness.Eventually(t, time.Minute, 100*time.Millisecond, "writes after the upgrade", w.RevAbove(before+100))
	}) {
		return
	}
	if !t.Run("a deletion after the upgrade, compacted", func(t *testing.T) {
		del, err := cli.Delete(t.Context(), "doomed")
		if err != nil || del.Deleted != 1 {
			t.Fatalf("delete after the upgrade: %v %v", del, err)
		}
		if _, err := cli.Compact(t.Context(), del.Header.Revision); err != nil {
			t.Fatal(err)
		}
	}) {
		return
	}
	t.Run("rollback by restore to "+vs[0], func(t *testing.T) {
		e := e.For(t)
		e.MustRun("rollback", "--strategy", "restore")
		st := e.WaitStatus(time.Minute, "every member back on "+vs[0], harness.Healthy)
		harness.RequireVersion(t, st, vs[0], "after the rollback by restore")
		rb := harness.LatestPlan(t, e)
		v := harness.UpgradePayload(t, rb)
		if rb.Kind != plan.KindRollback || rb.State != plan.Done || v.Strategy != "restore" || rb.Value("base-backup") == "" {
			t.Fatalf("rollback plan %s: kind %s, state %s, strategy %s, base backup %q", rb.ID, rb.Kind, rb.State, v.Strategy, rb.Value("base-backup"))
		}
		if e.Spec().Version != vs[0] {
			t.Fatalf("spec version after the rollback: %s", e.Spec().Version)
		}
		after := w.MaxRev()
		harness.Eventually(t, time.Minute, 100*time.Millisecond, "writes after the rollback", w.RevAbove(after))
		res := w.Finish(t)
		r, err := cli.Get(t.Context(), "doomed")
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kvs) != 0 {
			t.Fatalf("a key deleted after the upgrade is back after the rollback: %s", r.Kvs[0].Value)
		}
		if r.Header.Revision < res.MaxRev {
			t.Fatalf("revision went backwards: %d after %d was acknowledged", r.Header.Revision, res.MaxRev)
		}
	})
}

// TestIdleUpgradeTakesSnapshot: three members on 3.6, nobody writing, are
// upgraded to 3.7, a minor that needs a raft snapshot on the old version
// first, which the plan now sees through the agent (the data dir may be on
// another host). With no client writing, only Steward's own entries (the
// member's publish, and its lease nudges) bring the snapshot about.
// (It passes without the nudges too: the failure they prevent needs a
// member already at snapshot-count 1 from a failed earlier attempt; see
// SnapshotMember.)
func TestIdleUpgradeTakesSnapshot(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	e := harness.New(t)
	e.Up(3, vs[1])
	out := e.MustRun("upgrade", "apply", "--to", vs[2], "--health-timeout", "30s")
	st := e.WaitStatus(time.Minute, "every member on "+vs[2], harness.Healthy)
	harness.RequireVersion(t, st, vs[2], "after the idle upgrade")
	if p := harness.LatestPlan(t, e); p.State != plan.Done {
		t.Fatalf("plan %s: %s", p.State, out)
	}
}

// TestReplaceRefusedMidRollback: a rollback to 3.5 whose process dies just
// before its last step (the one that ends etcd's downgrade) leaves every
// member on 3.5 and the downgrade enabled, which 3.5 members do not
// report. `member replace` refuses from the plan before it changes
// anything (etcd would refuse the join), and works once `plan resume` has
// ended the downgrade. etcd's own check runs once an hour here, so nothing
// but Steward ends it.
func TestReplaceRefusedMidRollback(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	e := harness.New(t)
	upWithoutDowngradeCheck(e, vs[0])
	e.MustRun("upgrade", "apply", "--to", vs[1])
	killedAt := func(point string, args ...string) {
		t.Helper()
		so, se, err := e.RunEnv([]string{crashpoint.EnvVar + "=" + point}, args...)
		if err == nil || !strings.Contains(se, "crashpoint: "+point+"\n") {
			t.Fatalf("steward %s with %s=%s ended with %v; want it killed there\nstdout: %s\nstderr: %s", strings.Join(args, " "), crashpoint.EnvVar, point, err, so, se)
		}
	}
	killedAt(crashpoint.Indexed(crashpoint.PlanStepBefore, 0), "rollback")
	p := harness.LatestPlan(t, e)
	last := len(p.Steps) - 1
	if last < 1 || p.Steps[last].Kind != "cluster-version" {
		t.Fatalf("rollback plan %s: steps %+v, want at least two, the last cluster-version", p.ID, p.Steps)
	}
	killedAt(crashpoint.Indexed(crashpoint.PlanStepBefore, last), "plan", "resume")
	st := e.WaitStatus(time.Minute, "every member on "+vs[0], harness.Healthy)
	harness.RequireVersion(t, st, vs[0], "with the rollback stopped before its last step")
	for _, m := range e.Spec().Members {
		if got := peerGet(t, e, m.PeerURL+"/downgrade/enabled"); got != "true" {
			t.Fatalf("%s answers %q to /downgrade/enabled with the rollback stopped before its last step, want true", m.Name, got)
		}
	}
	victim := e.Spec().Members[1]
	pid := e.MemberPID(victim.Name)
	out := e.MustFail("member", "replace", victim.Name)
	if !strings.Contains(out, "plan "+p.ID+" enabled etcd's downgrade") || !strings.Contains(out, "plan resume") {
		t.Errorf("the refusal does not name the plan and what to do:\n%s", out)
	}
	if got := e.MemberPID(victim.Name); got != pid {
		t.Fatalf("%s was restarted or stopped by the refused replace (pid %d, then %d)", victim.Name, pid, got)
	}
	e.MustRun("plan", "resume")
	e.MustRun("member", "replace", victim.Name)
	if st := e.WaitStatus(time.Minute, "the replaced member healthy", harness.Healthy); st.Cluster.VotingMembers != 3 {
		t.Fatalf("%d voting members after the replace, want 3", st.Cluster.VotingMembers)
	}
}
