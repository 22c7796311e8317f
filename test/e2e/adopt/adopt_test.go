package adopt_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/pkg/adopt"
	"github.com/etcd-steward/steward/test/harness"
)

// adoptVersion is the etcd line the external member runs (issue 14's
// clusters are etcd 3.5).
const adoptVersion = "3.5.35"

// adoptUpgradeTo is the version TestAdoptAll upgrades the adopted cluster
// to: two hops from adoptVersion, as issue 14 asks.
const adoptUpgradeTo = "3.7.3"

// externalMember is an etcd process the test started by hand, as an
// operator's host would run it: no Steward involved.
type externalMember struct {
	pid                    int
	dataDir, certDir       string
	clientURL, peerURL     string
	listenClient, manifest string
	binary                 string
}

// startExternal starts one etcd 3.5 member with plain flags and some
// ETCD_* variables filling flags not given (etcd exits on a flag given
// both ways),
// and kills it (and removes its directories) in t.Cleanup.
func startExternal(t *testing.T) *externalMember {
	t.Helper()
	store := harness.Store(t)
	dir := t.TempDir()
	m := &externalMember{dataDir: filepath.Join(dir, "data"), certDir: filepath.Join(dir, "pki")}
	if err := os.MkdirAll(m.certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	ports := harness.FreePorts(t, 2)
	m.clientURL = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	m.peerURL = fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	// Listening on a second address too, as kubeadm's members listen on
	// 127.0.0.1 for their API server besides the advertised address.
	m.listenClient = m.clientURL + ",http://127.0.0.2:" + fmt.Sprint(ports[0])
	m.binary = filepath.Join(store, "etcd-v"+adoptVersion, "etcd")
	cmd := exec.Command(m.binary,
		"--name", "ext-1",
		"--data-dir="+m.dataDir,
		"--listen-client-urls="+m.listenClient,
		"--advertise-client-urls="+m.clientURL,
		"--listen-peer-urls="+m.peerURL,
		"--initial-cluster=ext-1="+m.peerURL,
		"--experimental-initial-corrupt-check=true",
	)
	cmd.Env = []string{
		"PATH=/usr/bin:/bin",
		"ETCD_INITIAL_ADVERTISE_PEER_URLS=" + m.peerURL,
		"ETCD_INITIAL_CLUSTER_TOKEN=adopt-e2e",
		"ETCD_SNAPSHOT_COUNT=5000",
		"ETCD_HEARTBEAT_INTERVAL=200",
		"ETCD_ELECTION_TIMEOUT=2000",
	}
	logPath := filepath.Join(dir, "etcd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m.pid = cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-m.pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	err = harness.Poll(30*time.Second, 200*time.Millisecond, func() error {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.clientURL}, DialTimeout: time.Second})
		if err != nil {
			return err
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err = cli.Get(ctx, "health")
		return err
	})
	if err != nil {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("the external member does not serve: %v; its log ends:\n%s", err, harness.LastLines(string(log), 20))
	}
	return m
}

// writeUnit writes a systemd unit describing m, as a distribution's
// would: the variables in an environment file and Environment=, the flags
// on a continued ExecStart line.
func (m *externalMember) writeUnit(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	envFile := filepath.Join(dir, "etcd.env")
	env := fmt.Sprintf("# etcd's settings\nETCD_INITIAL_ADVERTISE_PEER_URLS=%s\nETCD_INITIAL_CLUSTER_TOKEN=adopt-e2e\nETCD_SNAPSHOT_COUNT=5000\n", m.peerURL)
	if err := os.WriteFile(envFile, []byte(env), 0o600); err != nil {
		t.Fatal(err)
	}
	unit := fmt.Sprintf(`[Unit]
Description=etcd
After=network-online.target

[Service]
Type=notify
EnvironmentFile=%s
Environment="ETCD_HEARTBEAT_INTERVAL=200" ETCD_ELECTION_TIMEOUT=2000
Environment=DATA=%s
ExecStart=%s --name ext-1 \
  --data-dir=${DATA} \
  --listen-client-urls=%s \
  --advertise-client-urls=%s \
  --listen-peer-urls=%s \
  --initial-cluster=ext-1=%s \
  --experimental-initial-corrupt-check=true
Restart=on-failure

[Install]
WantedBy=multi-user.target
`, envFile, m.dataDir, m.binary, m.listenClient, m.clientURL, m.peerURL, m.peerURL)
	p := filepath.Join(dir, "etcd.service")
	if err := os.WriteFile(p, []byte(unit), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeManifest writes a kubeadm-style static pod manifest describing m:
// the container sees its data dir at /var/lib/etcd (a hostPath volume of
// the real one), its variables in env, as kubeadm's manifest would.
func (m *externalMember) writeManifest(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "etcd.yaml")
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: etcd-ext-1
  namespace: kube-system
  labels: {component: etcd, tier: control-plane}
spec:
  hostNetwork: true
  priorityClassName: system-node-critical
  containers:
  - name: etcd
    image: registry.k8s.io/etcd:%s-0
    imagePullPolicy: IfNotPresent
    command:
    - etcd
    - --name=ext-1
    - --data-dir=/var/lib/etcd
    - --listen-client-urls=%s
    - --advertise-client-urls=%s
    - --listen-peer-urls=%s
    - --initial-cluster=ext-1=%s
    - --experimental-initial-corrupt-check=true
    env:
    - {name: ETCD_INITIAL_ADVERTISE_PEER_URLS, value: "%s"}
    - {name: ETCD_INITIAL_CLUSTER_TOKEN, value: adopt-e2e}
    - {name: ETCD_SNAPSHOT_COUNT, value: "5000"}
    - {name: ETCD_HEARTBEAT_INTERVAL, value: "200"}
    - {name: ETCD_ELECTION_TIMEOUT, value: "2000"}
    volumeMounts:
    - {mountPath: /var/lib/etcd, name: etcd-data}
    - {mountPath: /etc/kubernetes/pki/etcd, name: etcd-certs}
  volumes:
  - name: etcd-data
    hostPath: {path: %s, type: DirectoryOrCreate}
  - name: etcd-certs
    hostPath: {path: %s, type: DirectoryOrCreate}
`, adoptVersion, m.listenClient, m.clientURL, m.peerURL, m.peerURL, m.peerURL, m.dataDir, m.certDir)
	if err := os.WriteFile(p, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAdoptDiscovery (issue 14): discovery of a member Steward did not
// start. One real etcd 3.5 process, started by the test with flags and
// ETCD_* variables; discovery from /proc, from a static pod manifest and
// from a systemd unit describing it give the same MemberRun, the one etcd
// itself runs (its name and peer URL, from a variable, as etcd reports
// them); the member ID check passes for its data dir and refuses another
// member's and an empty one; `steward adopt --dry-run` prints the same
// and the differences, and the member still serves.
func TestAdoptDiscovery(t *testing.T) {
	t.Parallel()
	m := startExternal(t)
	manifest := m.writeManifest(t)

	fromProc, err := adopt.FromProcess(t.Context(), m.pid)
	if err != nil {
		t.Fatalf("discovery from process %d: %v", m.pid, err)
	}
	fromManifest, err := adopt.FromManifestFile(manifest)
	if err != nil {
		t.Fatalf("discovery from %s: %v", manifest, err)
	}
	if fromProc.Version != adoptVersion || fromManifest.Version != adoptVersion {
		t.Errorf("versions: process %q, manifest %q, want %s", fromProc.Version, fromManifest.Version, adoptVersion)
	}
	if fromProc.Source.Kind != adopt.KindProcess || fromProc.Source.PID != m.pid || fromManifest.Source.Path != manifest {
		t.Errorf("sources: %+v, %+v", fromProc.Source, fromManifest.Source)
	}
	fromUnit, err := adopt.FromUnitFile(t.Context(), m.writeUnit(t))
	if err != nil {
		t.Fatalf("discovery from a unit: %v", err)
	}
	if fromUnit.Binary != m.binary || fromProc.Binary != m.binary {
		t.Errorf("binaries: unit %q, process %q, want %q", fromUnit.Binary, fromProc.Binary, m.binary)
	}
	// Apart from where each came from, the same member.
	a, b, c := fromProc, fromManifest, fromUnit
	a.Source, b.Source, c.Source = adopt.Source{}, adopt.Source{}, adopt.Source{}
	a.Binary, b.Binary, c.Binary = "", "", ""
	if !reflect.DeepEqual(a, b) {
		t.Errorf("process and manifest differ:\nprocess  %+v\nmanifest %+v", a, b)
	}
	if !reflect.DeepEqual(a, c) {
		t.Errorf("process and unit differ:\nprocess %+v\nunit    %+v", a, c)
	}
	if fromProc.Name != "ext-1" || fromProc.DataDir != m.dataDir || fromProc.InitialClusterToken != "adopt-e2e" ||
		fromProc.Flags["snapshot-count"] != "5000" || !reflect.DeepEqual(fromProc.InitialAdvertisePeerURLs, []string{m.peerURL}) {
		t.Errorf("discovered %+v", fromProc)
	}
	if err := adopt.Check(fromProc); err != nil {
		t.Errorf("Check: %v", err)
	}

	// What etcd runs: the member's name and peer URL as the cluster
	// reports them, and its member ID checked against the data dir.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.clientURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ml.Members) != 1 || ml.Members[0].Name != fromProc.Name || !reflect.DeepEqual(ml.Members[0].PeerURLs, fromProc.InitialAdvertisePeerURLs) {
		t.Fatalf("etcd reports %+v; discovery says %s %v", ml.Members, fromProc.Name, fromProc.InitialAdvertisePeerURLs)
	}
	id, err := adopt.CheckMember(fromManifest, ml.Header.ClusterId, ml.Members)
	if err != nil || id != ml.Members[0].ID {
		t.Fatalf("CheckMember of its own data dir: id %x, err %v; want %x", id, err, ml.Members[0].ID)
	}

	// Another member's data dir (a WAL of another member of this
	// cluster), and an empty one: refused, naming the problem.
	other := filepath.Join(t.TempDir(), "data")
	md, _ := (&etcdserverpb.Metadata{NodeID: ml.Members[0].ID + 1, ClusterID: ml.Header.ClusterId}).Marshal()
	w, err := wal.Create(zap.NewNop(), filepath.Join(other, "member", "wal"), md)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	for _, tc := range []struct{ dir, want string }{
		{other, fmt.Sprintf("holds member %x, but the cluster knows ext-1 as member %x", ml.Members[0].ID+1, ml.Members[0].ID)},
		{t.TempDir(), "holds no member"},
	} {
		r := fromManifest
		r.DataDir = tc.dir
		_, err := adopt.CheckMember(r, ml.Header.ClusterId, ml.Members)
		if !errors.Is(err, adopt.ErrNotThisMember) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckMember of %s: %v, want ErrNotThisMember with %q", tc.dir, err, tc.want)
		}
	}

	// Found by its data dir among this host's processes.
	pid, err := adopt.FindProcess(m.dataDir, "")
	if err != nil || pid != m.pid {
		t.Errorf("FindProcess by data dir: %d, %v; want %d", pid, err, m.pid)
	}

	// The command shows the same, and what Steward would set
	// differently: it listens only where it advertises.
	bin := harness.Binary(t)
	var results []adoptResult
	for _, src := range [][]string{{"--pid", fmt.Sprint(m.pid)}, {"--manifest", manifest}} {
		out, err := exec.CommandContext(t.Context(), bin, append([]string{"adopt", "--dry-run", "-o", "json"}, src...)...).Output()
		if err != nil {
			t.Fatalf("steward adopt --dry-run %v: %v: %s", src, err, stderrOf(err))
		}
		var r adoptResult
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("adopt --dry-run -o json: %v: %s", err, out)
		}
		results = append(results, r)
	}
	for i, r := range results {
		want := fromProc
		if i == 1 {
			want = fromManifest
		}
		if !reflect.DeepEqual(r.Member, want) {
			t.Errorf("adopt --dry-run printed %+v, want %+v", r.Member, want)
		}
		if !slices.Contains(r.Differences, adopt.Difference{Flag: "listen-client-urls", Current: m.listenClient, Steward: m.clientURL}) {
			t.Errorf("differences %+v do not show the second client listener dropped", r.Differences)
		}
	}
	// Nothing changed: the member still serves.
	ctx2, cancel2 := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel2()
	if _, err := cli.Get(ctx2, "still-here"); err != nil {
		t.Errorf("the member after discovery: %v", err)
	}
}

// adoptResult is `steward adopt --dry-run -o json`'s output.
type adoptResult struct {
	Member      adopt.MemberRun    `json:"member"`
	Differences []adopt.Difference `json:"differences"`
	Problem     string             `json:"problem"`
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}
