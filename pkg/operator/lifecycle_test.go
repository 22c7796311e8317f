package operator

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
)

// blocker starts a goroutine on cr that runs until its context ends and
// returns a channel closed when it returned.
func blocker(t *testing.T, l *lifecycle, cr *clusterRun) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	if !cr.Go(l, func(ctx context.Context) { <-ctx.Done(); close(done) }) {
		t.Fatal("Go refused on a live run")
	}
	return done
}

func ended(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// fakeCoordinator starts a process whose command line is a coordinator's
// of dir (`... certs renew --watch --dir DIR`), as proc.Find sees it.
func fakeCoordinator(t *testing.T, dir string) int {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "sleep 60; :", "steward", "certs", "renew", "--watch", "--dir", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait() }() // reaped as the operator's daemon.Start does
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	pid := cmd.Process.Pid
	deadline := time.Now().Add(5 * time.Second)
	for coordinatorDir(proc.Cmdline(pid)) == "" {
		if time.Now().After(deadline) {
			t.Fatalf("process %d never looked like a coordinator: %q", pid, proc.Cmdline(pid))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return pid
}

// TestLifecycle (issue 29 findings 1 and 2): what runs per EtcdCluster is
// keyed by its UID and ends with it: a deleted resource's goroutines end
// and are waited for, and its coordinator process is stopped; a resource
// of the same name with another UID never finds the old one's; the
// operator's stop ends every goroutine (their context is the operator's)
// and every coordinator of its state directory, and no run starts after.
func TestLifecycle(t *testing.T) {
	state := t.TempDir()
	l := &lifecycle{stateDir: state, log: logr.Discard()}
	ctx := t.Context()
	ec := testCluster()

	cr, replaced, err := l.run(ctx, ec)
	if err != nil || replaced {
		t.Fatal(err, replaced)
	}
	if again, _, _ := l.run(ctx, ec); again != cr {
		t.Fatal("a second reconcile of one UID got another run")
	}
	g1 := blocker(t, l, cr)
	coord := fakeCoordinator(t, StateDir(state, ec))
	other := testCluster()
	other.Name, other.UID = "other", "uid-other"
	crOther, _, _ := l.run(ctx, other)
	gOther := blocker(t, l, crOther)
	coordOther := fakeCoordinator(t, StateDir(state, other))
	if n := l.goroutines.Load(); n != 2 {
		t.Fatalf("%d goroutines counted, want 2", n)
	}

	// Deleted: its goroutine ended and its coordinator is gone when
	// stopKey returns; the other cluster's run on.
	l.stopKey(ctx, "prod/db", "deleted")
	if !ended(g1) || proc.Alive(coord) {
		t.Fatalf("after the deletion: goroutine ended %v, coordinator %d alive %v", ended(g1), coord, proc.Alive(coord))
	}
	if ended(gOther) || !proc.Alive(coordOther) {
		t.Fatalf("the deletion of db stopped another cluster's: goroutine %v, coordinator alive %v %q", ended(gOther), proc.Alive(coordOther), proc.Cmdline(coordOther))
	}
	if cr.Go(l, func(context.Context) {}) {
		t.Fatal("a stopped run started a goroutine")
	}

	// The same name, a new UID, while the old UID's run still runs (the
	// operator missed the deletion): the old one is stopped first.
	old, _, _ := l.run(ctx, ec)
	gOld := blocker(t, l, old)
	coordOld := fakeCoordinator(t, StateDir(state, ec))
	ec2 := testCluster()
	ec2.UID = types.UID("uid-2")
	cr2, replaced, err := l.run(ctx, ec2)
	if err != nil || !replaced || cr2 == old {
		t.Fatalf("new UID: %v replaced %v", err, replaced)
	}
	if !ended(gOld) || proc.Alive(coordOld) {
		t.Fatal("the new resource of the same name found the old one's goroutine or coordinator running")
	}
	g2 := blocker(t, l, cr2)

	// The operator stops: every goroutine ends (the operator's context)
	// and every coordinator of the state directory; none starts after.
	if err := l.shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if !ended(g2) || !ended(gOther) || proc.Alive(coordOther) || l.goroutines.Load() != 0 {
		t.Fatalf("after shutdown: %v %v coordinator alive %v, %d goroutines", ended(g2), ended(gOther), proc.Alive(coordOther), l.goroutines.Load())
	}
	if _, _, err := l.run(ctx, ec2); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("a run after shutdown: %v", err)
	}
}

// TestCoordinatorDir: which command lines are a coordinator's, and of
// which directory.
func TestCoordinatorDir(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"/usr/local/bin/steward", "certs", "renew", "--watch", "--dir", "/s/ns/db"}, "/s/ns/db"},
		{[]string{"steward", "certs", "renew", "--dir=/s/ns/db/", "--watch"}, "/s/ns/db"},
		{[]string{"steward", "certs", "renew", "--dir", "/s/ns/db"}, ""},
		{[]string{"steward", "agent", "--watch", "--dir", "/s/ns/db"}, ""},
		{[]string{"steward", "operator", "--state-dir", "/s"}, ""},
		{nil, ""},
	} {
		if got := coordinatorDir(tc.args); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestMarkInterrupted (finding 2): a plan whose step the operator's stop
// cut short (the engine recorded it failed) is left running, so the next
// leader resumes it; a plan that failed by itself is not touched by it
// unless the operator stopped.
func TestMarkInterrupted(t *testing.T) {
	dir := t.TempDir()
	c := &cluster.Cluster{Dir: dir}
	p := versionPlan(t, plan.KindUpgrade, plan.Failed, "3.5.35", "3.6.16")
	p.Error = "step 2: context canceled"
	p.Steps = []plan.Step{{Index: 0, State: plan.Done}, {Index: 1, State: plan.Failed, Error: "context canceled"}, {Index: 2, State: plan.Pending}}
	if err := c.Plans().Save(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	if d, _ := DecideVersion("3.6.16", "", p, p, false); d.Action != VersionNone {
		t.Fatalf("a failed plan before the mark: %+v", d)
	}
	if err := markInterrupted(c, p.ID); err != nil {
		t.Fatal(err)
	}
	got, err := c.Plans().Get(p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != plan.Running || got.Error != "" || got.Steps[1].State != plan.Running || got.Steps[0].State != plan.Done {
		t.Fatalf("marked plan: %+v", got)
	}
	if d, _ := DecideVersion("3.6.16", "", got, got, false); d.Action != VersionResume || d.Plan.ID != p.ID {
		t.Fatalf("the next leader's decision: %+v", d)
	}
}

// TestControllerOptions (finding 3): more than one resource is reconciled
// at once; each resource by one reconcile at a time (its run's lock).
func TestControllerOptions(t *testing.T) {
	if o := controllerOptions(); o.MaxConcurrentReconciles < 2 {
		t.Fatalf("MaxConcurrentReconciles %d: one slow cluster would hold up every other", o.MaxConcurrentReconciles)
	}
	l := &lifecycle{stateDir: t.TempDir(), log: logr.Discard()}
	a, _, _ := l.run(t.Context(), testCluster())
	b := testCluster()
	b.Name, b.UID = "b", "uid-b"
	rb, _, _ := l.run(t.Context(), b)
	a.reconcileMu.Lock()
	if !rb.reconcileMu.TryLock() {
		t.Fatal("a reconcile of one resource held up another's")
	}
	if a.reconcileMu.TryLock() {
		t.Fatal("two reconciles of one resource at once")
	}
}

// FuzzCoordinatorDir: any command line read from /proc is parsed without
// a panic, into "" or a clean path that the command line names.
func FuzzCoordinatorDir(f *testing.F) {
	f.Add("steward\x00certs\x00renew\x00--watch\x00--dir\x00/s/ns/db")
	f.Add("steward\x00certs\x00renew\x00--dir=/s/ns/db\x00--watch")
	f.Add("renew\x00--dir")
	f.Fuzz(func(t *testing.T, cmdline string) {
		args := strings.Split(cmdline, "\x00")
		d := coordinatorDir(args)
		if d != "" && d != filepath.Clean(d) {
			t.Fatalf("%q: %q not clean", args, d)
		}
		if d != "" && !strings.Contains(cmdline, "--watch") {
			t.Fatalf("%q: a directory without --watch", args)
		}
	})
}
