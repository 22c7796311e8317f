package kubeupgrade_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/etcd-steward/steward/internal/kubeimages"
	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/pkg/kubeupgrade"
	"github.com/etcd-steward/steward/pkg/kubeversion"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/test/harness"
)

// steward runs `steward ARGS` against the cluster's Steward directory
// with no KUBECONFIG (the local Kubernetes' kubeconfig beside it is
// chosen), env added; it returns stdout, stderr and the error.
func steward(t *testing.T, c *localkube.Cluster, env []string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), c.Steward, args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "KUBECONFIG=") && !strings.HasPrefix(e, "STEWARD_DIR=") && !strings.HasPrefix(e, "STEWARD_CRASHPOINT=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(append(cmd.Env, "STEWARD_DIR="+c.StewardDir), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

type versionsOut struct {
	Versions []kubeversion.VersionState `json:"versions"`
	Hosts    []struct {
		Host       string                 `json:"host"`
		Components []kubeversion.Instance `json:"components"`
	} `json:"hosts"`
}

func versions(t *testing.T, c *localkube.Cluster) versionsOut {
	t.Helper()
	out, stderr, err := steward(t, c, nil, "kube", "versions", "-o", "json")
	if err != nil {
		t.Fatalf("kube versions: %v: %s%s", err, out, stderr)
	}
	var v versionsOut
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("kube versions: %v: %s", err, out)
	}
	return v
}

// controlPlaneAt: every control-plane component of every host runs v.
func controlPlaneAt(v versionsOut, want string) error {
	n := 0
	for _, h := range v.Hosts {
		for _, c := range h.Components {
			if c.Component == kubeversion.Kubelet {
				continue
			}
			n++
			if c.Version != want {
				return fmt.Errorf("host %s: %s runs %q, want %s", h.Host, c.Component, c.Version, want)
			}
		}
	}
	if n != 9 {
		return fmt.Errorf("%d control-plane components, want 9", n)
	}
	return nil
}

// clients list, watch and write ConfigMaps through the balancer during
// the upgrade, with client-go's retries (its defaults), counting every
// request that failed and the longest one, and checking that the watch,
// re-established from its last resourceVersion after each close as a
// reflector does, never goes backwards.
type clients struct {
	failed    atomic.Int64
	requests  atomic.Int64
	backwards atomic.Int64
	rewatches atomic.Int64
	relists   atomic.Int64
	mu        sync.Mutex // owns longest, phaseLongest, errs, created, last
	longest   time.Duration
	// phaseLongest is the longest request since the last phase call.
	phaseLongest time.Duration
	errs         []string
	// created are the objects a create succeeded for; last the value of
	// each w-N the latest acknowledged write gave it.
	created []string
	last    map[string]int
}

// phaseMark is the counters at a phase's start.
type phaseMark struct {
	requests, failed int64
	start            time.Time
}

// phase starts a phase: the counters now, the phase's longest reset.
func (cl *clients) phase() phaseMark {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.phaseLongest = 0
	return phaseMark{cl.requests.Load(), cl.failed.Load(), time.Now()}
}

// since is what the clients saw since m: requests, failed, the longest.
func (cl *clients) since(m phaseMark) (requests, failed int64, longest time.Duration) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.requests.Load() - m.requests, cl.failed.Load() - m.failed, cl.phaseLongest
}

func (cl *clients) record(op string, start time.Time, err error) {
	cl.requests.Add(1)
	d := time.Since(start)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if d > cl.longest {
		cl.longest = d
	}
	if d > cl.phaseLongest {
		cl.phaseLongest = d
	}
	if err != nil {
		cl.failed.Add(1)
		if len(cl.errs) < 20 {
			cl.errs = append(cl.errs, fmt.Sprintf("%s %s: %v", time.Now().UTC().Format("15:04:05.000"), op, err))
		}
	}
}

func (cl *clients) run(ctx context.Context, cs kubernetes.Interface, ns string, wg *sync.WaitGroup) {
	wg.Go(func() { // writer: updates w-0..w-19, and creates c-N every 10th write
		for i := 0; ctx.Err() == nil; i++ {
			name := fmt.Sprintf("w-%d", i%20)
			create := i < 20
			if i >= 20 && i%10 == 0 {
				name, create = fmt.Sprintf("c-%d", i), true
			}
			start := time.Now()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"i": strconv.Itoa(i)}}
			var err error
			if create {
				_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
			} else {
				_, err = cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
			}
			if ctx.Err() != nil {
				return
			}
			cl.record("write "+name, start, err)
			if err == nil {
				cl.mu.Lock()
				if create {
					cl.created = append(cl.created, name)
				}
				if strings.HasPrefix(name, "w-") {
					cl.last[name] = i
				}
				cl.mu.Unlock()
			}
			sleep(ctx, 100*time.Millisecond)
		}
	})
	wg.Go(func() { // lister
		for ctx.Err() == nil {
			start := time.Now()
			_, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			if ctx.Err() != nil {
				return
			}
			cl.record("list", start, err)
			sleep(ctx, 200*time.Millisecond)
		}
	})
	wg.Go(func() { // watcher
		last := uint64(0)
		rv := ""
		for ctx.Err() == nil {
			start := time.Now()
			w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if ctx.Err() != nil {
				return
			}
			cl.record("watch", start, err)
			if err != nil {
				sleep(ctx, 200*time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if ctx.Err() != nil {
					break // the clients stopped: the stream's end is ours
				}
				if ev.Type == watch.Error {
					// 410 Gone: the resourceVersion left the server's
					// window; a reflector relists and watches from the
					// list (client-go's way, not a failure). Anything
					// else is one.
					if st, ok := ev.Object.(*metav1.Status); ok && st.Code == http.StatusGone {
						cl.relists.Add(1)
						start := time.Now()
						l, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
						cl.record("relist", start, err)
						if err == nil {
							rv = l.ResourceVersion
						}
						w.Stop()
						break
					}
					cl.record("watch event", time.Now(), fmt.Errorf("%v", ev.Object))
					continue
				}
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok {
					continue
				}
				n, err := strconv.ParseUint(cm.ResourceVersion, 10, 64)
				if err != nil {
					continue
				}
				if n < last || (n == last && ev.Type != watch.Bookmark) {
					cl.backwards.Add(1)
				}
				last, rv = n, cm.ResourceVersion
			}
			cl.rewatches.Add(1)
		}
	})
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// TestKubeUpgradeApply: `steward kube upgrade apply` moves the control
// plane of three nodes from the older version to the next minor while
// clients list, watch and write (updates and creations) through the
// balancer. Killed right after it rewrote the second API server's
// manifest (STEWARD_CRASHPOINT), the plan shows where it stopped and
// another apply is refused; `steward kube rollback` (its --dry-run first,
// changing nothing) then brings the two API servers the upgrade wrote
// back to their kept manifests, the restarting one first, every
// component back at the older version, the kept manifests gone, a second
// rollback refused. Apply again runs to completion: every component
// first with --emulated-version of the older minor, then the switch to
// the new minor's APIs and features (the point of no return, after which
// a rollback is refused). Through all of it: no failed request, no watch
// going backwards, every object created there and every update's last
// acknowledged value kept; the pods scheduled before keep running
// without a restart; at the end every control-plane component runs the
// target, the plan is complete with every component upgraded, and the
// kept manifests are gone. A target outside the catalogue is refused
// before anything changes.
func TestKubeUpgradeApply(t *testing.T) {
	c := harness.LocalKube(t)
	if c.Version != from {
		t.Fatalf("cluster of %s, want %s", c.Version, from)
	}
	ctx := t.Context()
	harness.Eventually(t, 2*time.Minute, time.Second, from+" on every control-plane component", func() error {
		return controlPlaneAt(versions(t, c), from)
	})

	// Refused before anything: a target outside the catalogue.
	if out, stderr, err := steward(t, c, nil, "kube", "upgrade", "apply", "--to", "v1.99.0"); err == nil || !strings.Contains(stderr, "not in Steward's catalogue") {
		t.Fatalf("apply --to v1.99.0: %v: %s%s", err, out, stderr)
	}
	if out, _, _ := steward(t, c, nil, "plan", "show"); !strings.Contains(out, "no plan") && strings.Contains(out, "kube-upgrade") {
		t.Fatalf("a refused apply left a plan: %s", out)
	}

	// The target's control-plane images on every node (a registry's
	// clusters pull them; localkube's never pull).
	root := harness.RepoRoot(t)
	imagesDir := os.Getenv("STEWARD_IMAGES")
	if imagesDir == "" {
		imagesDir = filepath.Join(root, ".cache", "images")
	}
	ix, err := kubeimages.ReadIndex(imagesDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, comp := range kubeversion.ControlPlane {
		img, ok := ix.Find("registry.k8s.io/" + comp + ":" + to)
		if !ok {
			t.Fatalf("no image of %s %s in %s: make images", comp, to, imagesDir)
		}
		if err := c.ImportImage(ctx, filepath.Join(imagesDir, img.File)); err != nil {
			t.Fatal(err)
		}
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ns := "kubeupgrade-e2e"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	// Pods scheduled before: one per node.
	pause := c.PauseImage // the one the nodes imported
	for _, n := range c.Nodes {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "keep-" + n.Name}, Spec: corev1.PodSpec{NodeName: n.Name,
			Containers: []corev1.Container{{Name: "pause", Image: pause, ImagePullPolicy: corev1.PullNever}}}}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	type podRun struct {
		uid      string
		restarts int32
	}
	before := map[string]podRun{}
	harness.Eventually(t, 2*time.Minute, time.Second, "the pods running", func() error {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
				return fmt.Errorf("pod %s: %s", p.Name, p.Status.Phase)
			}
			before[p.Name] = podRun{string(p.UID), p.Status.ContainerStatuses[0].RestartCount}
		}
		if len(before) != len(c.Nodes) {
			return fmt.Errorf("%d pods", len(before))
		}
		return nil
	})

	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	cl := &clients{last: map[string]int{}}
	cl.run(cctx, cs, ns, &wg)
	stopClients := func() {
		stop()
		wg.Wait()
	}
	defer stopClients()

	// Killed right after the second API server's manifest is written.
	second := c.Nodes[1].Name
	start := time.Now()
	out, stderr, err := steward(t, c, []string{"STEWARD_CRASHPOINT=" + kubeupgrade.PointManifestWritten + ":" + second + "/kube-apiserver"},
		"kube", "upgrade", "apply", "--to", to)
	if err == nil || !strings.Contains(stderr, "crashpoint: "+kubeupgrade.PointManifestWritten) {
		t.Fatalf("apply with the crash point: %v: %s%s", err, out, stderr)
	}
	t.Logf("apply killed after %.1fs at %s's API server", time.Since(start).Seconds(), second)
	out, stderr, err = steward(t, c, nil, "plan", "show", "-o", "json")
	if err != nil {
		t.Fatalf("plan show: %v: %s%s", err, out, stderr)
	}
	// plan show -o json of a kube-upgrade plan (kubeupgrade.View, read
	// into fields of its own: plan.Plan decodes itself).
	var shown struct {
		Kind       plan.Kind                    `json:"kind"`
		State      plan.State                   `json:"state"`
		KubeState  string                       `json:"kubeState"`
		Components []kubeupgrade.ComponentState `json:"components"`
	}
	if err := json.Unmarshal([]byte(out), &shown); err != nil {
		t.Fatalf("plan show: %v: %s", err, out)
	}
	if shown.Kind != kubeupgrade.KindKubeUpgrade || shown.KubeState != "upgrading-second-control-plane" {
		t.Errorf("plan after the kill: %s %s (%s)", shown.Kind, shown.KubeState, shown.State)
	}
	for _, cs := range shown.Components {
		want := kubeupgrade.ComponentPending
		switch {
		case cs.Host == c.Nodes[0].Name && cs.Component == kubeversion.APIServer:
			want = kubeupgrade.ComponentUpgraded
		case cs.Host == second && cs.Component == kubeversion.APIServer:
			want = kubeupgrade.ComponentUpgrading
		}
		if cs.State != want {
			t.Errorf("after the kill: %s %s %s, want %s", cs.Host, cs.Component, cs.State, want)
		}
	}
	if out, stderr, err := steward(t, c, nil, "kube", "upgrade", "apply", "--to", to); err == nil || !strings.Contains(stderr, "plan resume") {
		t.Errorf("a second apply while the plan is open: %v: %s%s", err, out, stderr)
	}
	statusOut, _, _ := steward(t, c, nil, "status")
	condOK := false
	for _, l := range strings.Split(statusOut, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == kubeupgrade.CondKubeUpgradeInProgress && f[1] == "True" && strings.Contains(l, "upgrading-second-control-plane") {
			condOK = true
		}
	}
	if !condOK {
		t.Errorf("status: no %s True at upgrading-second-control-plane:\n%s", kubeupgrade.CondKubeUpgradeInProgress, statusOut)
	}
	t.Logf("the upgrade until the kill: %.1fs", time.Since(start).Seconds())

	// Rolled back from there, under the clients: the dry run first
	// (nothing changed), then the rollback: node-b's API server (which
	// the kill left restarting) first, then node-a's; node-c's and every
	// controller, never written, left alone.
	out, stderr, err = steward(t, c, nil, "kube", "rollback", "--dry-run", "-o", "json")
	if err != nil {
		t.Fatalf("kube rollback --dry-run: %v: %s%s", err, out, stderr)
	}
	var rbShown struct {
		Kind       plan.Kind                   `json:"kind"`
		State      plan.State                  `json:"state"`
		KubeState  string                      `json:"kubeState"`
		Steps      []plan.Step                 `json:"steps"`
		Components []kubeupgrade.RestoredState `json:"components"`
	}
	if err := json.Unmarshal([]byte(out), &rbShown); err != nil {
		t.Fatalf("kube rollback --dry-run: %v: %s", err, out)
	}
	var rbSteps []string
	for _, s := range rbShown.Steps {
		rbSteps = append(rbSteps, s.Kind+"("+s.Member+")")
	}
	wantSteps := "rollback-started(),rolling-back-first-control-plane(" + second + "),rolling-back-second-control-plane(" + c.Nodes[0].Name + "),rollback-complete()"
	if rbShown.Kind != kubeupgrade.KindKubeRollback || strings.Join(rbSteps, ",") != wantSteps || len(rbShown.Components) != 2 {
		t.Errorf("rollback dry run: %s, steps %s (want %s), %d components", rbShown.Kind, strings.Join(rbSteps, ","), wantSteps, len(rbShown.Components))
	}
	if out, _, _ := steward(t, c, nil, "plan", "show", "-o", "json"); !strings.Contains(out, `"kind": "kube-upgrade"`) && !strings.Contains(out, `"kind":"kube-upgrade"`) {
		t.Errorf("the dry run changed the latest plan: %s", out)
	}
	rbMark := cl.phase()
	out, stderr, err = steward(t, c, nil, "kube", "rollback")
	if err != nil {
		t.Fatalf("kube rollback: %v: %s%s", err, out, stderr)
	}
	rbDur := time.Since(rbMark.start)
	reqs, failed, longest := cl.since(rbMark)
	t.Logf("rollback done in %.1fs; clients meanwhile: %d requests, %d failed, longest %s; it said:\n%s", rbDur.Seconds(), reqs, failed, longest, stderr)
	if failed != 0 {
		t.Errorf("%d requests failed through the rollback", failed)
	}
	if err := controlPlaneAt(versions(t, c), from); err != nil {
		t.Errorf("after the rollback: %v", err)
	}
	out, _, err = steward(t, c, nil, "plan", "show", "-o", "json")
	if err != nil || json.Unmarshal([]byte(out), &rbShown) != nil {
		t.Fatalf("plan show after the rollback: %v: %s", err, out)
	}
	if rbShown.Kind != kubeupgrade.KindKubeRollback || rbShown.KubeState != kubeupgrade.StepRollbackComplete {
		t.Errorf("after the rollback: %s %s (%s)", rbShown.Kind, rbShown.KubeState, rbShown.State)
	}
	for _, rc := range rbShown.Components {
		if rc.State != kubeupgrade.ComponentRolledBack || rc.ToVersion != from {
			t.Errorf("rolled back: %s %s %s to %s", rc.Host, rc.Component, rc.State, rc.ToVersion)
		}
	}
	for _, n := range c.Nodes {
		kept, _ := filepath.Glob(filepath.Join(n.Dir, "steward", "kube-manifests-kept", "*", "*"))
		if len(kept) > 0 {
			t.Errorf("node %s: kept manifests after the rollback: %v", n.Name, kept)
		}
	}
	if out, stderr, err := steward(t, c, nil, "kube", "rollback"); err == nil || !strings.Contains(stderr, "no kube-upgrade plan to roll back") {
		t.Errorf("a second rollback: %v: %s%s", err, out, stderr)
	}

	// Then the upgrade again, to the end: with --emulated-version first,
	// the switch to the new minor's APIs and features, the migration.
	applyMark := cl.phase()
	out, stderr, err = steward(t, c, nil, "kube", "upgrade", "apply", "--to", to)
	if err != nil {
		t.Fatalf("apply after the rollback: %v: %s%s", err, out, stderr)
	}
	reqs, failed, longest = cl.since(applyMark)
	t.Logf("upgrade done in %.1fs; clients meanwhile: %d requests, %d failed, longest %s; apply said:\n%s", time.Since(applyMark.start).Seconds(), reqs, failed, longest, stderr)
	if !strings.Contains(stderr, "--"+kubeversion.EmulatedVersionFlag) {
		t.Errorf("apply did not switch the emulated version off:\n%s", stderr)
	}
	// Past the point of no return: refused, nothing changed.
	if out, stderr, err := steward(t, c, nil, "kube", "rollback"); err == nil || !strings.Contains(stderr, "point of no return") {
		t.Errorf("a rollback of a complete upgrade: %v: %s%s", err, out, stderr)
	}
	// The clients a little after the last component.
	sleep(ctx, 5*time.Second)
	stopClients()

	cl.mu.Lock()
	t.Logf("clients: %d requests, %d failed, longest %s, %d watches re-established, %d relists after 410, %d events backwards; errors: %v",
		cl.requests.Load(), cl.failed.Load(), cl.longest, cl.rewatches.Load(), cl.relists.Load(), cl.backwards.Load(), cl.errs)
	created, last := slices.Clone(cl.created), maps.Clone(cl.last)
	cl.mu.Unlock()
	if cl.failed.Load() != 0 {
		t.Errorf("%d requests failed through the upgrade", cl.failed.Load())
	}
	if cl.backwards.Load() != 0 {
		t.Errorf("%d watch events went backwards", cl.backwards.Load())
	}
	// Every object written through the upgrade, the rollback and the
	// upgrade again is there, with its last acknowledged write.
	cms, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]int{}
	for _, cm := range cms.Items {
		if i, err := strconv.Atoi(cm.Data["i"]); err == nil {
			have[cm.Name] = i
		}
	}
	for _, name := range created {
		if _, ok := have[name]; !ok {
			t.Errorf("object %s, created, is gone", name)
		}
	}
	for name, i := range last {
		if have[name] < i {
			t.Errorf("object %s holds write %d, older than the last acknowledged %d", name, have[name], i)
		}
	}
	t.Logf("%d objects created and %d updated all there", len(created), len(last))

	if err := controlPlaneAt(versions(t, c), to); err != nil {
		t.Errorf("after the upgrade: %v", err)
	}
	out, _, err = steward(t, c, nil, "plan", "show", "-o", "json")
	if err != nil || json.Unmarshal([]byte(out), &shown) != nil {
		t.Fatalf("plan show: %v: %s", err, out)
	}
	if shown.KubeState != "complete" || len(shown.Components) != 9 {
		t.Errorf("plan: %s, %d components", shown.KubeState, len(shown.Components))
	}
	for _, cs := range shown.Components {
		if cs.State != kubeupgrade.ComponentUpgraded {
			t.Errorf("%s %s: %s", cs.Host, cs.Component, cs.State)
		}
	}
	for _, n := range c.Nodes {
		kept, _ := filepath.Glob(filepath.Join(n.Dir, "steward", "kube-manifests-kept", "*", "*"))
		if len(kept) > 0 {
			t.Errorf("node %s: kept manifests after the plan: %v", n.Name, kept)
		}
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		b, ok := before[p.Name]
		if !ok || string(p.UID) != b.uid || p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].RestartCount != b.restarts {
			t.Errorf("pod %s: %s %s, restarts %v; before %+v", p.Name, p.UID, p.Status.Phase, p.Status.ContainerStatuses, b)
		}
	}
}
