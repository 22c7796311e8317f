package adopt_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/kmigrate"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// attachArgs are the arguments of `steward attach` for a foreign cluster.
func attachArgs(f *harness.ForeignCluster, endpoints ...string) []string {
	if len(endpoints) == 0 {
		endpoints = f.Endpoints()
	}
	return []string{"attach", "--endpoints", strings.Join(endpoints, ","), "--cacert", f.CAFile, "--cert", f.CertFile, "--key", f.KeyFile}
}

// TestAttach attaches a three-member etcd 3.5 cluster that the test runs
// itself (plain flags, its own CA) while a writer writes to it, and works
// on it through the etcd API only: status with conditions, env, a full
// backup restored into a new Steward-run cluster with an equal keyspace,
// defragmentation, a leader move, the user's certificates listed; a
// command that needs the member processes is refused, pointing to adopt.
func TestAttach(t *testing.T) {
	t.Parallel()
	f := harness.StartForeignCluster(t, "3.5.35", 3)
	fcli := f.MustClient()
	w := harness.UnderWrites(t, fcli, workload.Options{Prefix: "/attach", Interval: 20 * time.Millisecond, Attempts: 5, Timeout: 2 * time.Second}, harness.Expect{})
	certBefore, err := os.ReadFile(f.CertFile)
	if err != nil {
		t.Fatal(err)
	}

	e := harness.New(t)
	out := e.MustRun(append(attachArgs(f, f.Members[0].ClientURL), "--name", "kube-etcd", "-o", "json")...)
	var r struct {
		Cluster, ClusterID string
		Members            []struct{ Name, ClientURL, PeerURL string }
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("attach -o json: %v\n%s", err, out)
	}
	st, err := fcli.Status(t.Context(), f.Members[0].ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%x", st.Header.ClusterId); r.ClusterID != want || len(r.Members) != 3 || r.Cluster != "kube-etcd" {
		t.Fatalf("attach found cluster %q ID %s, %d members; want kube-etcd ID %s, 3 (from one endpoint, the others from the member list):\n%s", r.Cluster, r.ClusterID, len(r.Members), want, out)
	}
	for i, m := range r.Members {
		if fm := f.Members[i]; m.Name != fm.Name || m.ClientURL != fm.ClientURL || m.PeerURL != fm.PeerURL {
			t.Errorf("member %d: got %+v, want %s %s %s", i, m, fm.Name, fm.ClientURL, fm.PeerURL)
		}
	}

	t.Log("Status")
	// Status: the members are healthy, their process someone else's.
	s := e.WaitStatus(30*time.Second, "the attached cluster healthy", harness.Healthy)
	for _, m := range s.Members {
		if m.Process != status.External || m.Agent != status.External {
			t.Errorf("member %s: process %q agent %q, want %q", m.Name, m.Process, m.Agent, status.External)
		}
	}
	if c := harness.Cond(s, status.CondReady); c.Status != "True" {
		t.Errorf("Ready: %+v", c)
	}
	if c := harness.Cond(s, status.CondCertificatesReady); c.Status != "True" {
		t.Errorf("CertificatesReady with the user's certificates: %+v", c)
	}
	if env := e.MustRun("env"); !strings.Contains(env, "ETCDCTL_CERT="+f.CertFile) || !strings.Contains(env, "ETCDCTL_CACERT="+f.CAFile) {
		t.Errorf("env does not name the user's certificate files:\n%s", env)
	}
	// The user's certificates are listed with their expiry.
	if certs := e.MustRun("certs", "list"); !strings.Contains(certs, "external client") || !strings.Contains(certs, "foreign-client") {
		t.Errorf("certs list does not show the user's client certificate:\n%s", certs)
	}

	t.Log("Refusals")
	// A command that needs the member processes: one line, pointing to adopt.
	for _, args := range [][]string{{"member", "stop", "infra1"}, {"member", "add", "infra4"}, {"upgrade", "plan", "--to", "3.6.16"}, {"up"}} {
		msg := e.MustFail(args...)
		if !strings.Contains(msg, "is attached") || !strings.Contains(msg, "steward adopt") || strings.Count(strings.TrimSpace(msg), "\n") > 0 {
			t.Errorf("%v on an attached cluster: want one line saying it is attached and naming steward adopt, got:\n%s", args, msg)
		}
	}
	refuseOperatorCerts(t, e)

	t.Log("Adopt's member check")
	// adopt --dry-run checks a member's data dir against the attached
	// cluster: the running member's holds it; a unit naming another
	// member's data dir is refused.
	list, err := fcli.MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, lm := range list.Members {
		ids[lm.Name] = fmt.Sprintf("%x", lm.ID)
	}
	var dry struct{ MemberID, MemberCheck, Problem string }
	m0 := f.Members[0]
	out = e.MustRun("adopt", "--dry-run", "--pid", strconv.Itoa(m0.PID()), "-o", "json")
	if err := json.Unmarshal([]byte(out), &dry); err != nil || dry.MemberCheck != "passed" || dry.MemberID != ids[m0.Name] {
		t.Errorf("adopt --dry-run --pid of %s: check %q member %q, want passed %s (%v):\n%s", m0.Name, dry.MemberCheck, dry.MemberID, ids[m0.Name], err, out)
	}
	var argv []string
	for _, a := range m0.Cmdline {
		if strings.HasPrefix(a, "--data-dir=") {
			a = "--data-dir=" + f.Members[1].DataDir
		}
		argv = append(argv, a)
	}
	unit := filepath.Join(t.TempDir(), "etcd.service")
	if err := os.WriteFile(unit, []byte("[Service]\nExecStart="+strings.Join(argv, " ")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if msg := e.MustFail("adopt", "--dry-run", "--unit", unit); !strings.Contains(msg, "holds member "+ids[f.Members[1].Name]) || !strings.Contains(msg, "names another member's data dir") {
		t.Errorf("adopt --dry-run of a unit naming %s's data dir for %s: %s", f.Members[1].Name, m0.Name, msg)
	}

	t.Log("Backup")
	// Restoring over someone else's members is refused: their backups
	// restore into a new cluster.
	if msg := e.MustFail("restore"); !strings.Contains(msg, "cannot restore into its members: cluster kube-etcd is attached") || !strings.Contains(msg, "new cluster") {
		t.Errorf("restore into the attached cluster: %s", msg)
	}
	if out := e.MustRun("alarm", "list"); strings.Contains(out, "NOSPACE") {
		t.Errorf("alarm list: %s", out)
	}

	// A full backup, taken under the writer.
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the writer to write", w.AckedAbove(50))
	var m backup.Manifest
	if err := json.Unmarshal([]byte(e.MustRun("backup", "now", "-o", "json")), &m); err != nil {
		t.Fatal(err)
	}
	if m.ClusterID != r.ClusterID {
		t.Errorf("backup of cluster %s, want %s", m.ClusterID, r.ClusterID)
	}
	e.MustRun("backup", "verify", m.ID)
	if list := e.MustRun("backup", "list"); !strings.Contains(list, m.ID) {
		t.Errorf("backup list does not show %s:\n%s", m.ID, list)
	}
	want := workload.TakeDigest(t, fcli, "/attach", m.EndRevision)

	t.Log("Maintenance")
	// Maintenance through the etcd API.
	e.MustRun("defrag")
	leader := s.Cluster.Leader
	to := "infra1"
	if leader == to {
		to = "infra2"
	}
	e.MustRun("leader", "move", "--to", to)
	e.WaitStatus(30*time.Second, "leadership on "+to, func(st *status.Status) bool { return st.Cluster.Leader == to && harness.Healthy(st) })

	w.Finish(t)

	t.Log("Restore into a new cluster")
	// The backup restored into a new cluster that Steward runs.
	n := harness.New(t)
	n.WriteSpec(1, harness.Versions()[1], func(s *spec.Cluster) {
		s.Backup.Store = filepath.Join(e.Dir, "backups")
	})
	// The new directory has its own backup key: the attached cluster's
	// is handed over, so the backup is trusted without an override.
	copyBackupKey(t, e.Dir, n.Dir)
	n.MustRun("restore", "--backup", m.ID)
	n.MustRun("up")
	workload.RequireEqual(t, "the restored cluster", workload.TakeDigest(t, n.Client(), "/attach", 0), want)

	// The user's files are read, never rewritten.
	if after, err := os.ReadFile(f.CertFile); err != nil || string(after) != string(certBefore) {
		t.Errorf("the user's client certificate changed (%v)", err)
	}
	// The attached cluster's members still run: down leaves them alone.
	e.MustRun("down")
	for _, fm := range f.Members {
		if !fm.Running() {
			t.Errorf("foreign member %s stopped", fm.Name)
		}
	}
	if _, err := fcli.Get(t.Context(), "/attach", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		t.Errorf("the attached cluster after steward down: %v", err)
	}
}

// TestAttachBadInput: endpoints of two clusters, a CA that did not sign
// the members' certificates, a client certificate the members do not
// trust, and a directory that already holds a cluster are each refused
// with one error naming the problem, and the directory is left as it was.
func TestAttachBadInput(t *testing.T) {
	t.Parallel()
	a := harness.StartForeignCluster(t, "3.5.35", 1)
	b := a.StartSibling(1)
	other, err := harness.WriteForeignPKI(t.TempDir(), "stranger")
	if err != nil {
		t.Fatal(err)
	}
	e := harness.New(t)
	empty := dirListing(t, e.Dir)

	withFiles := func(ca, cert, key string) []string {
		return []string{"attach", "--endpoints", a.Endpoints()[0], "--cacert", ca, "--cert", cert, "--key", key}
	}
	ac, bc := a.Members[0], b.Members[0]
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"a CA that did not sign the members' certificates", withFiles(other.CA, a.CertFile, a.KeyFile), []string{"certificate does not work against " + ac.ClientURL, "--cacert"}},
		{"a client certificate the members do not trust", withFiles(a.CAFile, other.ClientCert, other.ClientKey), []string{"certificate does not work against " + ac.ClientURL, "--cert"}},
		{"a key that is not the certificate's", withFiles(a.CAFile, a.CertFile, other.ClientKey), []string{"cannot load the client certificate", "--key"}},
		{"an endpoint that is not a URL", []string{"attach", "--endpoints", "127.0.0.1:2379", "--cacert", a.CAFile, "--cert", a.CertFile, "--key", a.KeyFile}, []string{`endpoint "127.0.0.1:2379"`, "--endpoints"}},
	} {
		msg := e.MustFail(tc.args...)
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: want %q in the error, got:\n%s", tc.name, w, msg)
			}
		}
		if n := strings.Count(strings.TrimSpace(msg), "\n"); n > 0 {
			t.Errorf("%s: want one error line, got %d:\n%s", tc.name, n+1, msg)
		}
		if got := dirListing(t, e.Dir); got != empty {
			t.Errorf("%s: the directory changed:\n%s\nwant:\n%s", tc.name, got, empty)
		}
	}

	// Two clusters of one operator (one CA, one client certificate).
	msg := e.MustFail("attach", "--endpoints", ac.ClientURL+","+bc.ClientURL, "--cacert", a.CAFile, "--cert", a.CertFile, "--key", a.KeyFile)
	ida, idb := clusterID(t, a), clusterID(t, b)
	for _, w := range []string{"2 different clusters", "cluster " + ida + " at " + ac.ClientURL, "cluster " + idb + " at " + bc.ClientURL, "--endpoints"} {
		if !strings.Contains(msg, w) {
			t.Errorf("endpoints of two clusters: want %q in the error, got:\n%s", w, msg)
		}
	}
	if got := dirListing(t, e.Dir); got != empty {
		t.Errorf("mixed clusters: the directory changed:\n%s", got)
	}

	// A directory that already holds a cluster.
	e.MustRun(attachArgs(a)...)
	before := dirListing(t, e.Dir)
	specBefore, err := os.ReadFile(filepath.Join(e.Dir, spec.FileName))
	if err != nil {
		t.Fatal(err)
	}
	msg = e.MustFail(attachArgs(a)...)
	if !strings.Contains(msg, "already holds a cluster") || !strings.Contains(msg, "--dir") {
		t.Errorf("attach into a directory with a cluster: %s", msg)
	}
	if after, _ := os.ReadFile(filepath.Join(e.Dir, spec.FileName)); string(after) != string(specBefore) || dirListing(t, e.Dir) != before {
		t.Errorf("attach into a directory with a cluster changed it")
	}
}

// dirListing lists every path under dir with its size, one a line.
func dirListing(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %d %v\n", strings.TrimPrefix(p, dir), fi.Size(), fi.Mode())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// clusterID is a foreign cluster's ID in hex, as etcd reports it.
func clusterID(t *testing.T, f *harness.ForeignCluster) string {
	t.Helper()
	st, err := f.MustClient().Status(t.Context(), f.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", st.Header.ClusterId)
}

// TestAttachContinuous: `attach --continuous` starts this machine's agent,
// whose backup loop wins the backup election although no agent runs any
// member, and records every change of the attached cluster under a
// writer; the backups (a full and its deltas) restored into a new
// Steward cluster hold the keyspace the writer left. A leader move on the
// attached cluster does not stop the recording. The agent serves metrics
// (`attach --metrics-address`) for every member, down while the operator
// stops one; `backup gc` keeps what the restore needs.
func TestAttachContinuous(t *testing.T) {
	t.Parallel()
	f := harness.StartForeignCluster(t, "3.5.35", 3)
	fcli := f.MustClient()
	e := harness.New(t)
	port, err := spec.FreePort("127.0.0.1")()
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := "127.0.0.1:" + strconv.Itoa(port)
	e.MustRun(append(attachArgs(f), "--continuous", "--metrics-address", metricsAddr)...)
	w := harness.UnderWrites(t, fcli, workload.Options{Prefix: "/cont", Interval: 10 * time.Millisecond, Attempts: 5, Timeout: 2 * time.Second}, harness.Expect{})
	st := e.WaitStatus(60*time.Second, "BackupReady with the attached cluster", func(st *status.Status) bool {
		return harness.Healthy(st) && harness.Cond(st, status.CondBackupReady).Status == "True"
	})

	// Metrics: the agent of --continuous reports every member of the
	// attached cluster (no agent runs them) and its backups; a member the
	// operator stops is reported down, and up again once started.
	if len(st.Agents) != 1 || st.Agents[0].MetricsURL != "http://"+metricsAddr+"/metrics" {
		t.Fatalf("status agents %+v: want metricsURL http://%s/metrics", st.Agents, metricsAddr)
	}
	memberUp := func(name string, up int) func() error {
		return func() error {
			body, err := harness.HTTPGet(t.Context(), st.Agents[0].MetricsURL)
			if err != nil {
				return err
			}
			want := fmt.Sprintf(`steward_member_up{agent="local",cluster=%q,member=%q} %d`, e.Spec().Name, name, up)
			if !strings.Contains(body, want) {
				return fmt.Errorf("no %s in\n%s", want, harness.GrepLines(body, "steward_member_up"))
			}
			if !strings.Contains(body, "steward_backup_recording{agent=\"local\"") {
				return fmt.Errorf("no steward_backup_recording series in\n%s", harness.GrepLines(body, "steward_backup"))
			}
			return nil
		}
	}
	for _, m := range f.Members {
		harness.Eventually(t, 30*time.Second, 500*time.Millisecond, "the agent exports "+m.Name+" up", memberUp(m.Name, 1))
	}
	stopped := f.Members[2]
	stopped.Stop()
	harness.Eventually(t, 30*time.Second, 500*time.Millisecond, "the agent exports "+stopped.Name+" down", memberUp(stopped.Name, 0))
	if err := stopped.Start(); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 60*time.Second, 500*time.Millisecond, "the agent exports "+stopped.Name+" up again", memberUp(stopped.Name, 1))
	st = e.WaitStatus(60*time.Second, "every member healthy again", harness.Healthy)
	to := "infra1"
	if st.Cluster.Leader == to {
		to = "infra2"
	}
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the writer to write", w.AckedAbove(100))
	e.MustRun("leader", "move", "--to", to)
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the writer to write after the leader move", w.AckedAbove(300))
	w.Finish(t)
	want := workload.TakeDigest(t, fcli, "/cont", 0)
	harness.WaitBackedUp(t, e, want.Head)
	// gc on an attached cluster keeps what the restore below needs.
	e.MustRun("backup", "gc")

	n := harness.New(t)
	n.WriteSpec(1, harness.Versions()[1], func(s *spec.Cluster) {
		s.Backup.Store = filepath.Join(e.Dir, "backups")
	})
	copyBackupKey(t, e.Dir, n.Dir)
	n.MustRun("restore")
	n.MustRun("up")
	workload.RequireEqual(t, "the cluster restored from continuous backups", workload.TakeDigest(t, n.Client(), "/cont", 0), want)
}

// copyBackupKey hands the cluster backup key of Steward directory from to
// Steward directory to, so backups of the one are trusted by the other.
func copyBackupKey(t *testing.T, from, to string) {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(from, "pki", "backup-auth.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(to, "pki"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(to, "pki", "backup-auth.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAttachKube: a kube-apiserver runs on an attached cluster (with the
// operator's certificate); `inspect storage-versions` counts its objects
// and `migrate storage` rewrites them through the API server, as on a
// cluster Steward runs.
func TestAttachKube(t *testing.T) {
	t.Parallel()
	f := harness.StartForeignCluster(t, "3.5.35", 1)
	e := harness.New(t)
	e.MustRun(attachArgs(f)...)
	k := e.StartKubeAPIServer()
	cs := k.Clientset()
	ctx := t.Context()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "attached"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const n = 25
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)}, Data: map[string]string{"i": fmt.Sprint(i)}}
		if _, err := cs.CoreV1().ConfigMaps("attached").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if cm := harness.InspectResource(harness.InspectJSON(t, e), "configmaps"); cm.Objects < n {
		t.Errorf("inspect storage-versions on the attached cluster: %d config maps, want at least %d", cm.Objects, n)
	}
	rep, _ := harness.MigrateReport(t, e, true, "--kubeconfig", k.Kubeconfig, "--resources", "configmaps", "--qps", "0")
	if cm := harness.MigrateResource(rep, "configmaps"); cm.Result != kmigrate.ResultMigrated || cm.Migrated < n {
		t.Errorf("migrate storage on the attached cluster: %+v", cm)
	}
}

// refuseOperatorCerts: on a cluster whose certificates are the operator's
// (attached, adopted or not), every command that would issue or renew
// from Steward's CA is refused in one line saying so, and writes nothing
// under pki/.
func refuseOperatorCerts(t *testing.T, e *harness.Env) {
	t.Helper()
	pkiFiles := func() map[string]string {
		out := map[string]string{}
		ents, _ := os.ReadDir(filepath.Join(e.Dir, "pki"))
		for _, ent := range ents {
			b, _ := os.ReadFile(filepath.Join(e.Dir, "pki", ent.Name()))
			out[ent.Name()] = string(b)
		}
		return out
	}
	before := pkiFiles()
	for _, args := range [][]string{{"certs", "renew", "--all"}, {"certs", "issue-client", "kube-apiserver"}, {"certs", "rotate-ca"}} {
		msg := e.MustFail(args...)
		if !strings.Contains(msg, "are the operator's") || strings.Count(strings.TrimSpace(msg), "\n") > 0 {
			t.Errorf("%v: want one line saying the certificates are the operator's, got:\n%s", args, msg)
		}
	}
	if after := pkiFiles(); !maps.Equal(before, after) {
		t.Errorf("a refused certificate command changed pki/: before %v, after %v", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}
}
