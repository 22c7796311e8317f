package kube_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
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
	"sync"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/etcd-steward/steward/pkg/kmigrate"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/harness"
)

const (
	migGroup    = "migrate.steward.test"
	migGadgets  = "gadgets." + migGroup
	migConfigs  = 1200 // more than two chunks of 500
	migGadgetsN = 30
)

var (
	migGadget = func(v string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: migGroup, Version: v, Resource: "gadgets"}
	}
)

// gadgetCRD is the gadgets CRD, whose versions are v1 (and v2); storage
// names the stored one.
func gadgetCRD(storage string, versions ...string) *unstructured.Unstructured {
	return testCRD(migGroup, "gadgets", "Gadget", storage, versions...)
}

// storageHash returns discovery's storageVersionHash of a resource
// (legacy discovery: the aggregated form has none).
func storageHash(t *testing.T, cs kubernetes.Interface, gv, resource string) string {
	t.Helper()
	l, err := cs.Discovery().ServerResourcesForGroupVersion(gv)
	if err != nil {
		return ""
	}
	for _, r := range l.APIResources {
		if r.Name == resource {
			return r.StorageVersionHash
		}
	}
	return ""
}

// parallel runs f(i) for i in [0, n) on 16 goroutines.
func parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	work := make(chan int)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

// metricValue reads one sample from Prometheus text: NAME{resource="R"}.
func metricValue(text, name, resource string) (float64, bool) {
	prefix := fmt.Sprintf(`%s{resource="%s"} `, name, resource)
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// TestMigrateStorage: a real kube-apiserver on a Steward cluster holds
// 1,200 config maps in three namespaces (more than two chunks; the
// namespaces a, a-b and b, whose key order is not "by namespace, then by
// name") and a CRD's custom resources, all written in plain text. Then
// encryption at rest (aescbc, key1) is turned on for config maps, and
// the inventory still shows them plain. The bad inputs come first, and
// change nothing. A migration killed with SIGKILL mid-run, whose saved
// continue token then expires (etcd compacted, API server restarted),
// resumes after the last saved chunk; afterwards the inventory shows every
// config map encrypted with key1. --auto then migrates nothing, until the
// CRD's storage version changes: then it migrates only the custom
// resources, which the inventory then shows in the new version. --all
// migrates every stored resource but events (built-in ones in protobuf,
// custom ones in JSON). A config map written while a migration runs
// conflicts, is got again and written back, and nothing the writer wrote
// is lost. Objects an admission policy refuses are reported with the
// reason, and fail the command.
func TestMigrateStorage(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(1, version36(t))
	k := e.NewKubeAPIServer()
	nobody := k.AddUser("migrate-nobody")
	reader := k.AddUser("migrate-reader")
	k.Start()
	cs := k.Clientset()
	dyn := k.Dynamic()
	ctx := t.Context()

	namespaces := []string{"mig-a", "mig-a-b", "mig-b"}
	for _, ns := range namespaces {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	parallel(t, migConfigs, func(i int) error {
		_, err := cs.CoreV1().ConfigMaps(namespaces[i%3]).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i), Labels: map[string]string{"app": "migrate"}},
			Data:       map[string]string{"index": strconv.Itoa(i), "payload": strings.Repeat("x", 200)},
		}, metav1.CreateOptions{})
		return err
	})
	t.Logf("created %d config maps in %s", migConfigs, time.Since(start).Round(time.Millisecond))
	createGadgets(t, dyn, ctx)

	// The reader may list and get config maps and gadgets, not update them.
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "migrate-reader"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{migGroup}, Resources: []string{"gadgets"}, Verbs: []string{"list"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "migrate-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "migrate-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "migrate-reader"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Encryption at rest for config maps, from the next start on.
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	encCfg := filepath.Join(k.Dir, "encryption.yaml")
	if err := os.WriteFile(encCfg, []byte(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [configmaps]
  providers:
  - aescbc:
      keys:
      - name: key1
        secret: `+base64.StdEncoding.EncodeToString(key)+`
  - identity: {}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	k.Stop()
	k.ExtraArgs = append(k.ExtraArgs, "--encryption-provider-config="+encCfg)
	k.Start()

	before := harness.InspectJSON(t, e)
	cmInv := harness.InspectResource(before, "configmaps")
	// kube-apiserver rewrites a config map or two of kube-system at start:
	// those are encrypted already.
	if cmInv.PlainObjects < migConfigs || cmInv.EncryptedObjects > 5 {
		t.Fatalf("inventory before the migration: %+v; want at least %d plain config maps", cmInv, migConfigs)
	}
	gInv := harness.InspectResource(before, migGadgets)
	if gInv.Objects != migGadgetsN || len(gInv.Versions) != 1 || gInv.Versions[0].APIVersion != migGroup+"/v1" {
		t.Fatalf("inventory of gadgets before the migration: %+v", gInv)
	}
	resources := "configmaps," + migGadgets

	if !t.Run("bad input", func(t *testing.T) {
		e := e.For(t)
		dir := t.TempDir()
		closed, err := spec.FreePort("127.0.0.1")()
		if err != nil {
			t.Fatal(err)
		}
		unreachable := filepath.Join(dir, "unreachable")
		if err := os.WriteFile(unreachable, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:%d", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, closed)), 0o600); err != nil {
			t.Fatal(err)
		}
		admin, err := os.ReadFile(k.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		badToken := filepath.Join(dir, "bad-token")
		if err := os.WriteFile(badToken, bytes.ReplaceAll(admin, []byte(k.Token), []byte("not-a-valid-token")), 0o600); err != nil {
			t.Fatal(err)
		}
		missing := filepath.Join(dir, "missing")
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{[]string{"--kubeconfig", k.Kubeconfig, "--resources", "confgmaps,gadgets." + migGroup + ",gizmos"},
				[]string{`unknown resource "confgmaps" (did you mean configmaps?)`, `unknown resource "gizmos"`, "nothing was migrated"}},
			{[]string{"--kubeconfig", unreachable, "--resources", "configmaps"},
				[]string{fmt.Sprintf("cannot reach the API server https://127.0.0.1:%d (kubeconfig %s)", closed, unreachable), "connection refused", "nothing was migrated"}},
			{[]string{"--kubeconfig", badToken, "--resources", "configmaps"},
				[]string{fmt.Sprintf("the API server %s refused the credentials of kubeconfig %s (401 Unauthorized", k.URL, badToken)}},
			{[]string{"--kubeconfig", nobody, "--resources", resources},
				[]string{fmt.Sprintf(`user "migrate-nobody" (kubeconfig %s) may not list configmaps, update configmaps, get configmaps, list %s, update %[2]s, get %[2]s (in all namespaces)`, nobody, migGadgets),
					"grant them", "nothing was migrated"}},
			{[]string{"--kubeconfig", reader, "--resources", resources},
				[]string{fmt.Sprintf(`user "migrate-reader" (kubeconfig %s) may not update configmaps, update %s, get %[2]s (in all namespaces)`, reader, migGadgets)}},
			{[]string{"--kubeconfig", missing, "--all"}, []string{"kubeconfig " + missing + ": stat " + missing + ": no such file or directory"}},
			{[]string{"--kubeconfig", k.Kubeconfig}, []string{"name the resources to migrate"}},
			{[]string{"--kubeconfig", k.Kubeconfig, "--all", "--resources", "configmaps"}, []string{"--all and --resources", "give one"}},
			{[]string{"--kubeconfig", k.Kubeconfig, "--all", "--workers", "0"}, []string{"--workers and --chunk-size must be at least 1"}},
			{[]string{"--kubeconfig", k.Kubeconfig, "--all", "-o", "xml"}, []string{`unknown output format "xml"`}},
		} {
			out := e.MustFail(append([]string{"migrate", "storage"}, tc.args...)...)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("%v: error does not say %q:\n%s", tc.args, w, out)
				}
			}
			if n := strings.Count(out, "Error:"); n != 1 {
				t.Errorf("%v: %d errors, want one:\n%s", tc.args, n, out)
			}
		}
		if _, err := os.Stat(kmigrate.StatePath(e.Dir)); !os.IsNotExist(err) {
			t.Errorf("a refused migration created its state database: %v", err)
		}
		if got := harness.InspectResource(harness.InspectJSON(t, e), "configmaps"); got.PlainObjects != cmInv.PlainObjects || got.EncryptedObjects != cmInv.EncryptedObjects {
			t.Errorf("config maps after the refused runs: %+v, before: %+v", got, cmInv)
		}
	}) {
		return
	}

	if !t.Run("kill and resume", func(t *testing.T) {
		e := e.For(t)
		// start runs a migration in the background and returns when the
		// metrics show at least n config maps migrated.
		type running struct {
			cmd            *exec.Cmd
			stdout, stderr bytes.Buffer
			exited         chan error
			metrics        string
			migrated       float64
		}
		start := func(n float64) *running {
			port, err := spec.FreePort("127.0.0.1")()
			if err != nil {
				t.Fatal(err)
			}
			r := &running{exited: make(chan error, 1)}
			r.cmd = exec.Command(e.Bin, "migrate", "storage", "--kubeconfig", k.Kubeconfig, "--resources", resources,
				"--qps", "120", "--workers", "4", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port), "-o", "json", "--dir", e.Dir)
			r.cmd.Env = append(os.Environ(), "STEWARD_DIR=")
			r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
			if err := r.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { r.exited <- r.cmd.Wait() }()
			harness.Eventually(t, 2*time.Minute, 20*time.Millisecond, fmt.Sprintf("%v config maps migrated (metrics)", n), func() error {
				select {
				case err := <-r.exited:
					t.Fatalf("migrate exited before it was stopped: %v\n%s", err, r.stderr.String())
				default:
				}
				resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
				if err != nil {
					return err
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				r.metrics = string(b)
				r.migrated, _ = metricValue(r.metrics, "steward_migrate_objects_migrated_total", "configmaps")
				if r.migrated < n {
					return fmt.Errorf("%v config maps migrated", r.migrated)
				}
				return nil
			})
			return r
		}

		// SIGTERM before the first chunk is done: the run stops at once,
		// says how to go on, and has saved no chunk.
		r := start(100)
		if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-r.exited:
			if err == nil {
				t.Errorf("an interrupted migration exited 0")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("migrate did not stop within 30 s of SIGTERM")
		}
		var rep kmigrate.Report
		if err := json.Unmarshal(r.stdout.Bytes(), &rep); err != nil {
			t.Fatalf("summary after SIGTERM: %v\n%s", err, r.stdout.String())
		}
		if cm := harness.MigrateResource(rep, "configmaps"); cm.Result != kmigrate.ResultInterrupted || cm.Migrated != 0 ||
			harness.MigrateResource(rep, migGadgets).Result != kmigrate.ResultNotStarted ||
			!strings.Contains(r.stderr.String(), "run the same command again to resume") {
			t.Errorf("after SIGTERM: %+v\n%s", rep.Resources, r.stderr.String())
		}

		// SIGKILL after the first chunk.
		r = start(600)
		if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-r.exited
		text, migrated := r.metrics, r.migrated
		t.Logf("killed after %v config maps migrated; stderr:\n%s", migrated, r.stderr.String())
		if !strings.Contains(r.stderr.String(), "configmaps: resuming (no chunk was finished: from the beginning)") {
			t.Errorf("the run after SIGTERM did not say it resumed")
		}
		if migrated >= migConfigs {
			t.Fatalf("killed too late: %v config maps migrated", migrated)
		}
		for _, m := range []string{"steward_migrate_objects_failed_total", "steward_migrate_objects_skipped_total", "steward_migrate_objects_remaining", "steward_migrate_retries_total"} {
			if _, ok := metricValue(text, m, "configmaps"); !ok {
				t.Errorf("metric %s{resource=\"configmaps\"} missing:\n%s", m, text)
			}
		}
		if rem, _ := metricValue(text, "steward_migrate_objects_remaining", "configmaps"); rem <= 0 || rem > migConfigs {
			t.Errorf("remaining %v mid-run", rem)
		}

		// The saved continue token expires: etcd compacts past it, and the
		// API server's watch cache is gone with its restart.
		cli := e.Client()
		resp, err := cli.Get(ctx, "compact-probe")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
			t.Fatal(err)
		}
		k.Stop()
		k.Start()

		rep, se := harness.MigrateReport(t, e, true, "--kubeconfig", k.Kubeconfig, "--resources", resources, "--qps", "0")
		t.Logf("resumed run:\n%s", se)
		all, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm := harness.MigrateResource(rep, "configmaps")
		if cm.Result != kmigrate.ResultMigrated || !cm.Resumed || cm.Failed != 0 || cm.ListRestarts != 1 ||
			cm.Migrated+cm.Skipped != int64(len(all.Items)) || cm.ThisRun.Migrated <= 0 || cm.ThisRun.Migrated > int64(len(all.Items))-500 {
			t.Errorf("config maps after the resume: %+v; want migrated, resumed, one list restart, %d objects in all, at least one chunk (500) done before the kill", cm, len(all.Items))
		}
		if !strings.Contains(se, "configmaps: resuming after") || !strings.Contains(se, "the continue token expired (410 Gone)") {
			t.Errorf("stderr does not tell the resumption and the expired token:\n%s", se)
		}
		g := harness.MigrateResource(rep, migGadgets)
		if g.Result != kmigrate.ResultMigrated || g.Resumed || g.Migrated != migGadgetsN || g.ThisRun.Migrated != migGadgetsN || g.Version != "v1" {
			t.Errorf("gadgets: %+v", g)
		}
		if !rep.OK() || rep.Totals.Resources != 2 || rep.Totals.Failed != 0 || rep.StateFile != filepath.Join(e.Dir, "migrate.db") {
			t.Errorf("report %+v", rep)
		}

		// Every config map is now stored encrypted with key1.
		after := harness.InspectResource(harness.InspectJSON(t, e), "configmaps")
		if after.PlainObjects != 0 || after.EncryptedObjects != int64(len(all.Items)) || len(after.Encryption) != 1 ||
			after.Encryption[0].Provider != "aescbc" || after.Encryption[0].KeyName != "key1" {
			t.Errorf("config maps after the migration: %+v; want all %d encrypted with aescbc key1", after, len(all.Items))
		}
		// Their content did not change.
		got, err := cs.CoreV1().ConfigMaps("mig-a-b").Get(ctx, "cm-0001", metav1.GetOptions{})
		if err != nil || got.Data["index"] != "1" || got.Data["payload"] != strings.Repeat("x", 200) || got.Labels["app"] != "migrate" {
			t.Errorf("config map after the migration: %+v, %v", got, err)
		}
	}) {
		return
	}

	if !t.Run("auto", func(t *testing.T) {
		e := e.For(t)
		rep, _ := harness.MigrateReport(t, e, true, "--kubeconfig", k.Kubeconfig, "--resources", resources, "--auto")
		for _, r := range rep.Resources {
			if r.Result != kmigrate.ResultUpToDate || r.ThisRun.Migrated != 0 {
				t.Errorf("--auto right after a migration: %+v", r)
			}
		}
		if len(rep.Resources) != 2 || rep.Totals.ThisRun.Migrated != 0 {
			t.Errorf("--auto report %+v", rep)
		}

		// The CRD's storage version moves to v2: its hash changes.
		oldHash := storageHash(t, cs, migGroup+"/v1", "gadgets")
		crd, err := dyn.Resource(crdGVR).Get(ctx, migGadgets, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		crd.Object["spec"] = gadgetCRD("v2", "v1", "v2").Object["spec"]
		if _, err := dyn.Resource(crdGVR).Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		harness.Eventually(t, 30*time.Second, 200*time.Millisecond, "the gadgets' storageVersionHash to change", func() error {
			if h := storageHash(t, cs, migGroup+"/v2", "gadgets"); h == "" || h == oldHash {
				return fmt.Errorf("storageVersionHash %q of %s/v2 gadgets (was %q)", h, migGroup, oldHash)
			}
			return nil
		})
		rep, se := harness.MigrateReport(t, e, true, "--kubeconfig", k.Kubeconfig, "--resources", resources, "--auto")
		t.Logf("--auto after the storage version change:\n%s", se)
		if cm := harness.MigrateResource(rep, "configmaps"); cm.Result != kmigrate.ResultUpToDate || cm.ThisRun.Migrated != 0 {
			t.Errorf("config maps: %+v", cm)
		}
		if g := harness.MigrateResource(rep, migGadgets); g.Result != kmigrate.ResultMigrated || g.ThisRun.Migrated != migGadgetsN || g.Resumed || g.Version != "v2" {
			t.Errorf("gadgets: %+v", g)
		}
		gInv := harness.InspectResource(harness.InspectJSON(t, e), migGadgets)
		if gInv.Objects != migGadgetsN || len(gInv.Versions) != 1 || gInv.Versions[0].APIVersion != migGroup+"/v2" {
			t.Errorf("gadgets after --auto: %+v; want all %d stored as %s/v2", gInv, migGadgetsN, migGroup)
		}

		// --all: every stored resource that allows list, get and update, but
		// events; then --auto (all resources) has nothing to do.
		rep, se = harness.MigrateReport(t, e, true, "--kubeconfig", k.Kubeconfig, "--all", "--qps", "0", "--workers", "8")
		t.Logf("--all: %d resources, %d objects migrated\n%s", rep.Totals.Resources, rep.Totals.ThisRun.Migrated, se)
		seen := map[string]bool{}
		for _, r := range rep.Resources {
			seen[r.Resource] = true
			if r.Result != kmigrate.ResultMigrated {
				t.Errorf("--all: %+v", r)
			}
		}
		for _, want := range []string{"configmaps", migGadgets, "namespaces", "clusterroles.rbac.authorization.k8s.io", "customresourcedefinitions.apiextensions.k8s.io", "serviceaccounts"} {
			if !seen[want] {
				t.Errorf("--all did not migrate %s", want)
			}
		}
		for _, not := range []string{"events", "events.events.k8s.io", "tokenreviews.authentication.k8s.io", "bindings", "componentstatuses"} {
			if seen[not] {
				t.Errorf("--all migrated %s", not)
			}
		}
		rep, _ = harness.MigrateReport(t, e, true, "--kubeconfig", k.Kubeconfig, "--auto")
		if rep.Totals.ThisRun.Migrated != 0 || rep.Totals.Resources != len(seen) {
			t.Errorf("--auto after --all: %d of %d resources, %d objects migrated", rep.Totals.Resources, len(seen), rep.Totals.ThisRun.Migrated)
		}
		for _, r := range rep.Resources {
			if r.Result != kmigrate.ResultUpToDate {
				t.Errorf("--auto after --all: %+v", r)
			}
		}
	}) {
		return
	}

	// An object changed while the migration runs: its update conflicts
	// (the PUT carries the listed resourceVersion), Steward gets it again,
	// in protobuf like the list, and writes that back. Nothing the writer
	// wrote is lost.
	if !t.Run("conflict", func(t *testing.T) {
		e := e.For(t)
		// mig-b/cm-1199 is the last config map in list order: it is listed
		// seconds before its turn comes (--workers 1, --qps 100), and the
		// writer changes it several times meanwhile. The writer's pace
		// (4 a second) leaves Steward's get and update after a conflict,
		// milliseconds apart, almost always alone: faster, it made the
		// update conflict six times in a row (MaxConflicts is 5).
		const ns, name = "mig-b", "cm-1199"
		stop := make(chan struct{})
		done := make(chan struct{})
		var last string // written by the writer goroutine, read after done
		var writeErr error
		go func() {
			defer close(done)
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for n := 1; ; n++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					writeErr = err
					return
				}
				cm.Data["writer"] = strconv.Itoa(n)
				if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err == nil {
					last = cm.Data["writer"]
				} else if !apierrors.IsConflict(err) { // Steward's write came between
					writeErr = err
					return
				}
			}
		}()
		rep, se := harness.MigrateReport(t, e, true, "--kubeconfig", k.Kubeconfig, "--resources", "configmaps", "--workers", "1", "--qps", "100")
		close(stop)
		<-done
		if writeErr != nil {
			t.Fatalf("writer: %v", writeErr)
		}
		cm := harness.MigrateResource(rep, "configmaps")
		t.Logf("%d conflicts, writer's last value %s\n%s", cm.Conflicts, last, se)
		if cm.Result != kmigrate.ResultMigrated || cm.Failed != 0 || cm.ThisRun.Migrated < migConfigs {
			t.Errorf("config maps: %+v", cm)
		}
		if cm.Conflicts < 1 {
			t.Errorf("no conflict while %s/%s was written during the migration: %+v", ns, name, cm)
		}
		got, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || last == "" || got.Data["writer"] != last || got.Data["index"] != "1199" {
			t.Errorf("%s/%s after the migration: %v %v; want the writer's last value %q", ns, name, got.Data["writer"], err, last)
		}
	}) {
		return
	}

	t.Run("admission rejection", func(t *testing.T) {
		e := e.For(t)
		fail := admissionv1.Fail
		if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &admissionv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "migrate-frozen"},
			Spec: admissionv1.ValidatingAdmissionPolicySpec{
				FailurePolicy: &fail,
				MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionv1.RuleWithOperations{
						Operations: []admissionv1.OperationType{admissionv1.Update},
						Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
					},
				}}},
				Validations: []admissionv1.Validation{{
					Expression: "!has(object.metadata.labels) || !('frozen' in object.metadata.labels)",
					Message:    "frozen config maps may not be updated",
				}},
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &admissionv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "migrate-frozen"},
			Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "migrate-frozen", ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		frozen := []string{"cm-0003", "cm-0500", "cm-1000"}
		for _, n := range frozen {
			if _, err := cs.CoreV1().ConfigMaps("mig-b").Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "frozen-" + n, Labels: map[string]string{"frozen": "yes"}},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		harness.Eventually(t, 30*time.Second, 200*time.Millisecond, "the policy to refuse updates", func() error {
			cm, err := cs.CoreV1().ConfigMaps("mig-b").Get(ctx, "frozen-cm-0003", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = cs.CoreV1().ConfigMaps("mig-b").Update(ctx, cm, metav1.UpdateOptions{})
			switch {
			case err == nil:
				return errors.New("the update of frozen-cm-0003 went through")
			case !strings.Contains(err.Error(), "frozen config maps may not be updated"):
				return fmt.Errorf("the update of frozen-cm-0003 failed otherwise: %w", err)
			}
			return nil
		})
		so, se, err := e.Run("migrate", "storage", "--kubeconfig", k.Kubeconfig, "--resources", "configmaps", "-o", "json", "--qps", "0")
		if err == nil {
			t.Fatalf("a migration with refused objects succeeded:\n%s\n%s", so, se)
		}
		if !strings.Contains(se, "configmaps: 3 objects refused") || strings.Count(se, "Error:") != 1 {
			t.Errorf("stderr:\n%s", se)
		}
		var rep kmigrate.Report
		if err := json.Unmarshal([]byte(so), &rep); err != nil {
			t.Fatalf("summary: %v\n%s", err, so)
		}
		cm := harness.MigrateResource(rep, "configmaps")
		if cm.Result != kmigrate.ResultFailed || cm.Failed != 3 || len(cm.Failures) != 3 || cm.Migrated < migConfigs {
			t.Fatalf("config maps: %+v", cm)
		}
		for i, f := range cm.Failures {
			if f.Namespace != "mig-b" || f.Name != "frozen-"+frozen[i] || (f.Code != 422 && f.Code != 403) || !strings.Contains(f.Reason, "frozen config maps may not be updated") {
				t.Errorf("failure %d: %+v", i, f)
			}
		}
		// The table names them too.
		so, _, _ = e.Run("migrate", "storage", "--kubeconfig", k.Kubeconfig, "--resources", "configmaps", "--qps", "0")
		t.Logf("table:\n%s", so)
		for _, w := range []string{"REFUSED OBJECTS", "frozen-cm-0500", "frozen config maps may not be updated", "failed"} {
			if !strings.Contains(so, w) {
				t.Errorf("table does not show %q", w)
			}
		}
	})
}

func createGadgets(t *testing.T, dyn dynamic.Interface, ctx context.Context) {
	t.Helper()
	if _, err := dyn.Resource(crdGVR).Create(ctx, gadgetCRD("v1", "v1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the gadgets to be served", func() error {
		_, err := dyn.Resource(migGadget("v1")).Namespace("mig-a").List(ctx, metav1.ListOptions{})
		return err
	})
	parallel(t, migGadgetsN, func(i int) error {
		_, err := dyn.Resource(migGadget("v1")).Namespace([]string{"mig-a", "mig-b"}[i%2]).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": migGroup + "/v1",
			"kind":       "Gadget",
			"metadata":   map[string]any{"name": fmt.Sprintf("g-%02d", i)},
			"spec":       map[string]any{"size": int64(i)},
		}}, metav1.CreateOptions{})
		return err
	})
}
