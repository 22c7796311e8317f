package adopt

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	adoptpkg "github.com/etcd-steward/steward/pkg/adopt"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/spec"
)

const manifest = `kind: Pod
spec:
  containers:
  - name: etcd
    image: registry.k8s.io/etcd:3.5.35-0
    command: [etcd, --name=m1, --data-dir=/var/lib/etcd, "--listen-client-urls=http://10.0.0.1:2379,http://127.0.0.1:2379",
      --advertise-client-urls=http://10.0.0.1:2379, --listen-peer-urls=http://10.0.0.1:2380,
      --initial-advertise-peer-urls=http://10.0.0.1:2380, --initial-cluster=m1=http://10.0.0.1:2380]
`

// run runs `steward adopt ARGS -o json` and returns stdout and the error.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := NewCommand(&cli.Globals{Output: "json"})
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	cmd.SetContext(t.Context())
	err := cmd.Execute()
	return out.String(), err
}

func TestAdoptCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "etcd.yaml")
	if err := os.WriteFile(good, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	fsync := filepath.Join(dir, "nofsync.yaml")
	if err := os.WriteFile(fsync, []byte(strings.Replace(manifest, "--name=m1,", "--name=m1, --unsafe-no-fsync,", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string // "" succeeds
	}{
		{"dry run of a manifest", []string{"--dry-run", "--manifest", good}, ""},
		{"no dry run, no attached cluster", []string{"--manifest", good}, "no attached cluster in"},
		{"no source", []string{"--dry-run"}, "exactly one of"},
		{"undo with a source", []string{"--undo", "m1", "--manifest", good}, "--undo NAME takes no other flag"},
		{"two sources", []string{"--dry-run", "--manifest", good, "--pid", "1"}, "exactly one of"},
		{"missing manifest", []string{"--dry-run", "--manifest", filepath.Join(dir, "nope.yaml")}, "read static pod manifest"},
		{"a flag Steward cannot keep", []string{"--dry-run", "--manifest", fsync}, "--unsafe-no-fsync turns off fsync"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, tc.args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var r Result
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if r.Member.Name != "m1" || r.Member.Version != "3.5.35" || r.Problem != "" {
				t.Errorf("result %+v", r)
			}
			found := false
			for _, d := range r.Differences {
				found = found || d.Flag == "listen-client-urls" && d.Steward == "http://10.0.0.1:2379"
			}
			if !found {
				t.Errorf("differences %+v lack the dropped listener", r.Differences)
			}
		})
	}
}

// TestAdoptHint: the refusals of an adoption read as they did when the
// library named the commands and the flag: the command adds them.
func TestAdoptHint(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{refusal.New(adoptpkg.ErrAdopted, "member m2 is adopted already (agent local)"),
			"member m2 is adopted already (agent local); `steward adopt --undo m2` gives it back"},
		{refusal.New(adoptpkg.ErrNoAgent, "cluster kube has no agent on this machine to run member m2"),
			`cluster kube has no agent on this machine to run member m2: attach with --continuous (it adds this machine's agent "local")`},
		{refusal.New(adoptpkg.ErrNoBinary, "member m2 runs etcd 3.5.98, which its agent would start it with, but it is missing"),
			"member m2 runs etcd 3.5.98, which its agent would start it with, but it is missing; import that version (`steward binaries import`) before adopting"},
		{refusal.New(adoptpkg.ErrUnhealthy, "not every member is healthy"), "not every member is healthy"},
	} {
		if got := adoptHint(tc.err, "m2"); got.Error() != tc.want {
			t.Errorf("adoptHint = %q\nwant %q", got, tc.want)
		}
	}
}

// TestAdoptNoBinaryAdvice: a member whose version the store lacks is
// refused with the store's problem inside, which reads, once the command
// and main advised it, as it did when the library named the commands.
func TestAdoptNoBinaryAdvice(t *testing.T) {
	dir := t.TempDir()
	c := &cluster.Cluster{Dir: dir, Spec: &spec.Cluster{Name: "kube", Token: "attached-feed", Version: "3.5.98",
		External: &spec.External{CAFile: "/ca.crt", CertFile: "/c.crt", KeyFile: "/c.key", ClusterID: "feed"},
		Agents:   []spec.Agent{{Name: spec.LocalAgent, Address: "unix:///tmp/agent.sock"}},
		Members:  []spec.Member{{Name: "m1", ClientURL: "https://127.0.0.1:2379", PeerURL: "https://127.0.0.1:2380"}}}}
	run := adoptpkg.MemberRun{Name: "m1", DataDir: "/var/lib/m1", AdvertiseClientURLs: []string{"https://127.0.0.1:2379"},
		InitialAdvertisePeerURLs: []string{"https://127.0.0.1:2380"}, Source: adoptpkg.Source{Kind: adoptpkg.KindManifest, Path: "/etc/kubernetes/manifests/etcd.yaml"}}
	_, err := adoptpkg.NewPlan(t.Context(), c, run, time.Now())
	if _, ok := binaries.ProblemOf(err); !ok || !errors.Is(err, adoptpkg.ErrNoBinary) {
		t.Fatalf("NewPlan = %v; want ErrNoBinary with the store's problem", err)
	}
	want := "member m1 runs etcd 3.5.98, which its agent would start it with, but etcd 3.5.98 is not in the binary store " +
		c.Spec.BinaryStoreDir(dir) + " and is not the embedded version " + binaries.EmbeddedVersion() +
		`: import it with "steward binaries import": etcd version not found; import that version (` + "`steward binaries import`) before adopting"
	if got := cli.LibraryAdvice(adoptHint(err, "m1")); got.Error() != want {
		t.Errorf("advised refusal:\n%v\nwant %s", got, want)
	}
}
