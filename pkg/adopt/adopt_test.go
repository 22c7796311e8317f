package adopt

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/pkg/refusal"
)

// files is a fake host file system for readFile.
func files(m map[string]string) func(string) ([]byte, error) {
	return func(p string) ([]byte, error) {
		if s, ok := m[p]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
}

func TestPrecedence(t *testing.T) {
	conf := files(map[string]string{
		"/etc/etcd/etcd.yaml": `name: from-file
data-dir: /var/lib/etcd-file
listen-client-urls: [https://10.0.0.1:2379, https://127.0.0.1:2379]
client-transport-security:
  cert-file: /pki/server.crt
  client-cert-auth: true
peer-transport-security:
  cert-file: /pki/peer.crt
  trusted-ca-file: /pki/ca.crt
  allowed-cn: [etcd-peer]
snapshot-count: 5000
no-such-key: 1
`,
	})
	for _, tc := range []struct {
		name        string
		args, env   []string
		want        map[string]string // effective flags checked
		wantIgnored []string
		wantConfig  string
		wantErr     error
	}{
		{
			name:        "env fills flags not given",
			args:        []string{"--name=a", "--data-dir", "/d"},
			env:         []string{"ETCD_SNAPSHOT_COUNT=10", "PATH=/bin", "ETCD_NAMEX=1"},
			want:        map[string]string{"name": "a", "data-dir": "/d", "snapshot-count": "10"},
			wantIgnored: []string{"ETCD_NAMEX"},
		},
		// etcd exits on a flag given both ways.
		{name: "flag and env both", args: []string{"--name=a"}, env: []string{"ETCD_NAME=b"}, wantErr: ErrSource},
		{
			name: "single dash, bool alone, last wins",
			args: []string{"-name", "a", "-client-cert-auth", "--name=c", "--enable-pprof=false"},
			want: map[string]string{"name": "c", "client-cert-auth": "true", "enable-pprof": "false"},
		},
		{
			name:        "env naming no flag is ignored",
			args:        []string{"--name=a"},
			env:         []string{"ETCD_NO_SUCH_FLAG=1", "ETCD_UNSUPPORTED_ARCH=arm64"},
			want:        map[string]string{"name": "a"},
			wantIgnored: []string{"ETCD_NO_SUCH_FLAG", "ETCD_UNSUPPORTED_ARCH"},
		},
		{
			name: "config file is the whole configuration",
			args: []string{"--config-file=/etc/etcd/etcd.yaml", "--name=flag"},
			env:  []string{"ETCD_DATA_DIR=/env"},
			want: map[string]string{
				"name": "from-file", "data-dir": "/var/lib/etcd-file",
				"listen-client-urls": "https://10.0.0.1:2379,https://127.0.0.1:2379",
				"cert-file":          "/pki/server.crt", "client-cert-auth": "true",
				"peer-cert-file": "/pki/peer.crt", "peer-trusted-ca-file": "/pki/ca.crt",
				"peer-cert-allowed-cn": "etcd-peer", "snapshot-count": "5000",
			},
			wantIgnored: []string{"--name", "ETCD_DATA_DIR", "no-such-key"},
			wantConfig:  "/etc/etcd/etcd.yaml",
		},
		{
			name:        "config file from the environment",
			env:         []string{"ETCD_CONFIG_FILE=/etc/etcd/etcd.yaml", "ETCD_NAME=env"},
			want:        map[string]string{"name": "from-file"},
			wantIgnored: []string{"ETCD_NAME", "no-such-key"},
			wantConfig:  "/etc/etcd/etcd.yaml",
		},
		{
			name: "3.5, 3.6 and 3.7 spellings known",
			args: []string{"--proxy=off", "--enable-v2=false", "--experimental-compact-hash-check-enabled", "--compact-hash-check-time=1m", "--feature-gates=CompactHashCheck=true"},
			want: map[string]string{"proxy": "off", "enable-v2": "false", "experimental-compact-hash-check-enabled": "true", "compact-hash-check-time": "1m"},
		},
		{name: "unknown flag", args: []string{"--no-such-flag=1"}, wantErr: ErrUnknownFlag},
		{name: "stray argument", args: []string{"--name=a", "extra"}, wantErr: ErrUnknownFlag},
		{name: "flag without value", args: []string{"--data-dir"}, wantErr: ErrUnknownFlag},
		{name: "missing config file", args: []string{"--config-file=/nope"}, wantErr: ErrSource},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ignored, cf, err := effective(tc.args, tc.env, conf)
			if tc.wantErr != nil {
				var r *refusal.Refusal
				if !errors.Is(err, tc.wantErr) || !errors.As(err, &r) {
					t.Fatalf("err = %v, want a refusal of %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("--%s = %q, want %q", k, got[k], v)
				}
			}
			if !reflect.DeepEqual(ignored, tc.wantIgnored) {
				t.Errorf("ignored = %q, want %q", ignored, tc.wantIgnored)
			}
			if cf != tc.wantConfig {
				t.Errorf("config file = %q, want %q", cf, tc.wantConfig)
			}
		})
	}
}

const kubeadmManifest = `apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: kube-system
spec:
  containers:
  - command:
    - etcd
    - --advertise-client-urls=https://10.0.0.1:2379
    - --cert-file=/etc/kubernetes/pki/etcd/server.crt
    - --client-cert-auth=true
    - --data-dir=/var/lib/etcd
    - --experimental-initial-corrupt-check=true
    - --experimental-watch-progress-notify-interval=5s
    - --initial-advertise-peer-urls=https://10.0.0.1:2380
    - --initial-cluster=cp1=https://10.0.0.1:2380
    - --key-file=/etc/kubernetes/pki/etcd/server.key
    - --listen-client-urls=https://127.0.0.1:2379,https://10.0.0.1:2379
    - --listen-metrics-urls=http://127.0.0.1:2381
    - --listen-peer-urls=https://10.0.0.1:2380
    - --name=cp1
    - --peer-cert-file=/etc/kubernetes/pki/etcd/peer.crt
    - --peer-client-cert-auth=true
    - --peer-key-file=/etc/kubernetes/pki/etcd/peer.key
    - --peer-trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt
    - --snapshot-count=10000
    - --trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt
    env:
    - name: ETCD_QUOTA_BACKEND_BYTES
      value: "8589934592"
    image: registry.k8s.io/etcd:3.5.16-0
    name: etcd
    volumeMounts:
    - mountPath: /var/lib/etcd
      name: etcd-data
    - mountPath: /etc/kubernetes/pki/etcd
      name: etcd-certs
  hostNetwork: true
  volumes:
  - hostPath:
      path: /etc/kubernetes/pki/etcd
      type: DirectoryOrCreate
    name: etcd-certs
  - hostPath:
      path: /srv/etcd
      type: DirectoryOrCreate
    name: etcd-data
`

func TestParseManifest(t *testing.T) {
	r, err := ParseManifest([]byte(kubeadmManifest), "/etc/kubernetes/manifests/etcd.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := MemberRun{
		Name:                     "cp1",
		DataDir:                  "/srv/etcd", // through the hostPath volume
		ListenClientURLs:         []string{"https://127.0.0.1:2379", "https://10.0.0.1:2379"},
		AdvertiseClientURLs:      []string{"https://10.0.0.1:2379"},
		ListenPeerURLs:           []string{"https://10.0.0.1:2380"},
		InitialAdvertisePeerURLs: []string{"https://10.0.0.1:2380"},
		InitialCluster:           "cp1=https://10.0.0.1:2380",
		InitialClusterState:      "new",
		InitialClusterToken:      "etcd-cluster",
		ClientTLS:                TLS{CertFile: "/etc/kubernetes/pki/etcd/server.crt", KeyFile: "/etc/kubernetes/pki/etcd/server.key", TrustedCAFile: "/etc/kubernetes/pki/etcd/ca.crt", ClientCertAuth: true},
		PeerTLS:                  TLS{CertFile: "/etc/kubernetes/pki/etcd/peer.crt", KeyFile: "/etc/kubernetes/pki/etcd/peer.key", TrustedCAFile: "/etc/kubernetes/pki/etcd/ca.crt", ClientCertAuth: true},
		Version:                  "3.5.16",
		Binary:                   "registry.k8s.io/etcd:3.5.16-0",
		Flags: map[string]string{
			"experimental-initial-corrupt-check":          "true",
			"experimental-watch-progress-notify-interval": "5s",
			"listen-metrics-urls":                         "http://127.0.0.1:2381",
			"snapshot-count":                              "10000",
			"quota-backend-bytes":                         "8589934592", // from env
		},
		Source: Source{Kind: KindManifest, Path: "/etc/kubernetes/manifests/etcd.yaml"},
	}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("got  %+v\nwant %+v", r, want)
	}
	if err := Check(r); err != nil {
		t.Errorf("Check: %v", err)
	}
}

func TestParseManifestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, manifest, want string
	}{
		{"not yaml", "{", "not a pod"},
		{"a deployment", "kind: Deployment\n", `holds a "Deployment"`},
		{"no etcd container", "kind: Pod\nspec:\n  containers:\n  - name: x\n    command: [sleep]\n", "no etcd container"},
		{"valueFrom", "kind: Pod\nspec:\n  containers:\n  - name: etcd\n    command: [etcd]\n    env:\n    - name: ETCD_NAME\n      valueFrom:\n        fieldRef: {fieldPath: metadata.name}\n", "valueFrom"},
		{"unknown flag", "kind: Pod\nspec:\n  containers:\n  - name: etcd\n    command: [etcd, --bogus=1]\n", "--bogus, a flag etcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest([]byte(tc.manifest), "m.yaml", nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestParseUnit(t *testing.T) {
	fs := files(map[string]string{
		"/etc/default/etcd": "# defaults\nETCD_NAME=from-file\nETCD_DATA_DIR=\"/var/lib/etcd\"\nexport ETCD_INITIAL_CLUSTER_TOKEN=tok\n",
	})
	for _, tc := range []struct {
		name, unit string
		want       map[string]string // effective flags checked
		wantBinary string
		wantErr    string
	}{
		{
			name: "continuations, env file, Environment overrides it",
			unit: `[Unit]
Description=etcd
ExecStart=/bogus
[Service]
EnvironmentFile=/etc/default/etcd
EnvironmentFile=-/etc/default/missing
Environment="ETCD_NAME=n1" ETCD_SNAPSHOT_COUNT=42
Environment=PEERS=https://10.0.0.2:2380
ExecStart=
ExecStart=-/usr/local/bin/etcd \
  --listen-peer-urls "${PEERS}" \
  # a comment inside
  --heartbeat-interval=200
Restart=always
`,
			want: map[string]string{
				"name": "n1", "data-dir": "/var/lib/etcd", "initial-cluster-token": "tok",
				"snapshot-count": "42", "listen-peer-urls": "https://10.0.0.2:2380", "heartbeat-interval": "200",
			},
			wantBinary: "/usr/local/bin/etcd",
		},
		{
			name: "a $VAR word splits",
			unit: "[Service]\nEnvironment=\"ARGS=--name=x --data-dir=/d\"\nExecStart=/usr/bin/etcd $ARGS\n",
			want: map[string]string{"name": "x", "data-dir": "/d"}, wantBinary: "/usr/bin/etcd",
		},
		{name: "no ExecStart", unit: "[Service]\nType=notify\n", wantErr: "no ExecStart"},
		{name: "not etcd", unit: "[Service]\nExecStart=/bin/sleep 1\n", wantErr: "not etcd"},
		{name: "missing env file", unit: "[Service]\nEnvironmentFile=/nope\nExecStart=/usr/bin/etcd\n", wantErr: "EnvironmentFile=/nope"},
		{name: "unclosed quote", unit: "[Service]\nExecStart=/usr/bin/etcd \"--name=x\n", wantErr: "unclosed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseUnit([]byte(tc.unit), "/etc/systemd/system/etcd.service", fs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := r.EffectiveFlags()
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("--%s = %q, want %q", k, got[k], v)
				}
			}
			if r.Binary != tc.wantBinary || r.Source.Kind != KindUnit {
				t.Errorf("binary %q source %+v", r.Binary, r.Source)
			}
		})
	}
}

func TestParseProcess(t *testing.T) {
	conf := files(map[string]string{"/run/etcd/conf.yaml": "name: cf\ndata-dir: data\n"})
	for _, tc := range []struct {
		name        string
		args, env   []string
		wantName    string
		wantDataDir string
		wantConfig  string
		wantCluster string
	}{
		{"defaults relative to cwd", []string{"/usr/bin/etcd"}, nil, "default", "/run/etcd/default.etcd", "", "default=http://localhost:2380"},
		{"env fills", []string{"etcd", "--name=a"}, []string{"ETCD_DATA_DIR=/srv/a", "ETCD_INITIAL_ADVERTISE_PEER_URLS=http://h:1,http://h:2"}, "a", "/srv/a", "", "a=http://h:1,a=http://h:2"},
		{"relative config file", []string{"etcd", "--config-file", "conf.yaml"}, nil, "cf", "/run/etcd/data", "/run/etcd/conf.yaml", "cf=http://localhost:2380"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseProcess(tc.args, tc.env, "/run/etcd", 42, conf)
			if err != nil {
				t.Fatal(err)
			}
			if r.Name != tc.wantName || r.DataDir != tc.wantDataDir || r.Source.ConfigFile != tc.wantConfig || r.Source.PID != 42 {
				t.Errorf("name %q data dir %q source %+v; want %q %q %q", r.Name, r.DataDir, r.Source, tc.wantName, tc.wantDataDir, tc.wantConfig)
			}
			if r.InitialCluster != tc.wantCluster {
				t.Errorf("initial cluster %q, want etcd's default %q", r.InitialCluster, tc.wantCluster)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		run   MemberRun
		wants []string // in the one error; none: accepted
	}{
		{"plain", MemberRun{Name: "a", Flags: map[string]string{"snapshot-count": "1"}}, nil},
		{"false bools are fine", MemberRun{Name: "a", Flags: map[string]string{"unsafe-no-fsync": "false"}}, nil},
		{"proxy off is fine", MemberRun{Name: "a", Flags: map[string]string{"proxy": "off"}}, nil},
		{"proxy on", MemberRun{Name: "a", Flags: map[string]string{"proxy": "on"}}, []string{"--proxy"}},
		{"every problem named", MemberRun{Name: "a", WALDir: "/wal", Flags: map[string]string{
			"unsafe-no-fsync": "true", "discovery-token": "x", "experimental-peer-skip-client-san-verification": "true",
		}}, []string{"--wal-dir", "--unsafe-no-fsync", "--discovery-token"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.run)
			if len(tc.wants) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrUnsupported) {
				t.Fatalf("err = %v, want ErrUnsupported", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v does not name %s", err, w)
				}
			}
		})
	}
}

func TestCheckMember(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	md, _ := (&etcdserverpb.Metadata{NodeID: 0x10, ClusterID: 0xc1}).Marshal()
	w, err := wal.Create(zap.NewNop(), filepath.Join(dataDir, "member", "wal"), md)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	members := []*etcdserverpb.Member{{ID: 0x10, Name: "a"}, {ID: 0x20, Name: "b"}}
	for _, tc := range []struct {
		name, member, dataDir string
		clusterID             uint64
		want                  string // "" accepted
	}{
		{"its data dir", "a", dataDir, 0xc1, ""},
		{"cluster not checked", "a", dataDir, 0, ""},
		{"another member's", "b", dataDir, 0xc1, "holds member 10, but the cluster knows b as member 20"},
		{"another cluster's", "a", dataDir, 0xc2, "belongs to cluster c1"},
		{"unknown name", "z", dataDir, 0xc1, "no member named z"},
		{"empty dir", "a", t.TempDir(), 0xc1, "holds no member"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := MemberRun{Name: tc.member, DataDir: tc.dataDir, Source: Source{Kind: KindManifest, Path: "m.yaml"}}
			id, err := CheckMember(r, tc.clusterID, members)
			if tc.want == "" {
				if err != nil || id != 0x10 {
					t.Fatalf("id %x err %v", id, err)
				}
				return
			}
			if !errors.Is(err, ErrNotThisMember) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrNotThisMember containing %q", err, tc.want)
			}
		})
	}
}

func TestDifferences(t *testing.T) {
	r, err := ParseManifest([]byte(kubeadmManifest), "etcd.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	steward := []string{
		"--name=cp1", "--data-dir=/srv/etcd",
		"--listen-client-urls=https://10.0.0.1:2379", "--advertise-client-urls=https://10.0.0.1:2379",
		"--listen-peer-urls=https://10.0.0.1:2380", "--initial-advertise-peer-urls=https://10.0.0.1:2380",
		"--initial-cluster=cp1=https://10.0.0.1:2380", "--initial-cluster-state=existing",
		"--initial-cluster-token=etcd-cluster", "--logger=zap",
		"--cert-file=/etc/kubernetes/pki/etcd/server.crt", "--key-file=/etc/kubernetes/pki/etcd/server.key",
		"--trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt", "--client-cert-auth=true",
		"--peer-cert-file=/etc/kubernetes/pki/etcd/peer.crt", "--peer-key-file=/etc/kubernetes/pki/etcd/peer.key",
		"--peer-trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt", "--peer-client-cert-auth=true",
		"--snapshot-count=10000", "--quota-backend-bytes=8589934592",
		"--experimental-initial-corrupt-check=true", "--experimental-watch-progress-notify-interval=5s",
		"--listen-metrics-urls=http://127.0.0.1:2381",
	}
	want := []Difference{
		{Flag: "listen-client-urls", Current: "https://127.0.0.1:2379,https://10.0.0.1:2379", Steward: "https://10.0.0.1:2379"},
		{Flag: "logger", Current: "", Steward: "zap"},
	}
	if got := Differences(r, steward); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	// The same listen URLs in another order are no difference.
	steward[2] = "--listen-client-urls=https://10.0.0.1:2379,https://127.0.0.1:2379"
	if got := Differences(r, steward); !reflect.DeepEqual(got, want[1:]) {
		t.Errorf("reordered: got %+v", got)
	}
}

func TestMemberConfig(t *testing.T) {
	r, err := ParseManifest([]byte(kubeadmManifest), "etcd.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.MemberConfig()
	if err != nil {
		t.Fatal(err)
	}
	if c.ClientURL != "https://10.0.0.1:2379" || c.PeerURL != "https://10.0.0.1:2380" || c.DataDir != "/srv/etcd" ||
		c.SnapshotCount != 10000 || c.QuotaBackendBytes != 8589934592 || c.TLS == nil || c.TLS.CA != "/etc/kubernetes/pki/etcd/ca.crt" {
		t.Errorf("config %+v", c)
	}
	wantExtra := map[string]string{
		"experimental-initial-corrupt-check":          "true",
		"experimental-watch-progress-notify-interval": "5s",
		"listen-metrics-urls":                         "http://127.0.0.1:2381",
	}
	if !reflect.DeepEqual(c.ExtraFlags, wantExtra) {
		t.Errorf("extra flags %v, want %v", c.ExtraFlags, wantExtra)
	}
	// kubeadm gives each member a peer certificate named after its node
	// and no --peer-cert-allowed-cn: the peer port keeps accepting any
	// certificate of the CA, or its peers would be refused.
	if !c.TLS.PeerAnyCN || c.TLS.PeerAllowedCN != "" {
		t.Errorf("kubeadm member without --peer-cert-allowed-cn: PeerAnyCN %v, PeerAllowedCN %q; want any name", c.TLS.PeerAnyCN, c.TLS.PeerAllowedCN)
	}
	r.Flags["peer-cert-allowed-cn"] = "etcd-peer"
	if c, err := r.MemberConfig(); err != nil || c.TLS.PeerAnyCN || c.TLS.PeerAllowedCN != "etcd-peer" {
		t.Errorf("with --peer-cert-allowed-cn=etcd-peer: %+v (err %v), want that name kept", c.TLS, err)
	}
	delete(r.Flags, "peer-cert-allowed-cn")
	r.Flags["snapshot-count"] = "many"
	if _, err := r.MemberConfig(); !errors.Is(err, ErrSource) {
		t.Errorf("a non-number snapshot count: err = %v", err)
	}
}

func TestImageVersion(t *testing.T) {
	for in, want := range map[string]string{
		"registry.k8s.io/etcd:3.5.16-0":               "3.5.16",
		"quay.io/coreos/etcd:v3.6.4":                  "3.6.4",
		"registry.k8s.io/etcd:3.5.16-0@sha256:abcdef": "3.5.16",
		"localhost:5000/etcd":                         "",
		"etcd:latest":                                 "",
	} {
		if got := imageVersion(in); got != want {
			t.Errorf("imageVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestUnitDropIns: a unit's drop-ins are found as systemd finds them (its
// NAME.service.d/ and the type-wide service.d/ of every directory, a name
// in a higher-priority directory hiding the same name below, applied in
// file-name order whatever the directory) and applied after the unit: an
// override of ExecStart= and Environment= is what the member runs with.
func TestUnitDropIns(t *testing.T) {
	etc, lib, own := t.TempDir(), t.TempDir(), t.TempDir()
	put := func(dir, rel, s string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	unit := filepath.Join(own, "etcd.service")
	put(own, "etcd.service", "[Service]\nEnvironment=NODE=base ETCD_SNAPSHOT_COUNT=1\nExecStart=/usr/bin/etcd --data-dir=/var/lib/etcd --name=${NODE}\n")
	// 10-exec: the override of ExecStart; in etc and lib, etc's hides lib's.
	put(etc, "etcd.service.d/10-exec.conf", "[Service]\nExecStart=\nExecStart=/opt/etcd/etcd --data-dir=/srv/etcd --name=${NODE}\n")
	put(lib, "etcd.service.d/10-exec.conf", "[Service]\nExecStart=\nExecStart=/wrong/etcd\n")
	// 20-env, type-wide in lib: applied after 10-exec (name order).
	put(lib, "service.d/20-env.conf", "[Service]\nEnvironment=NODE=dropin\n")
	// 05-other: a file with no section first; its line must not count as [Service].
	put(etc, "etcd.service.d/05-other.conf", "ExecStart=/not/applied\n[Unit]\nDescription=x\n")
	put(etc, "etcd.service.d/notes.txt", "[Service]\nExecStart=/not/a/drop-in\n")

	dirs := []string{own, etc, lib}
	got := DropInFiles("etcd.service", dirs)
	want := []string{
		filepath.Join(etc, "etcd.service.d/05-other.conf"),
		filepath.Join(etc, "etcd.service.d/10-exec.conf"),
		filepath.Join(lib, "service.d/20-env.conf"),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("DropInFiles = %q, want %q", got, want)
	}
	var ds []DropIn
	for _, p := range got {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, DropIn{Path: p, Data: b})
	}
	b, _ := os.ReadFile(unit)
	r, err := ParseUnit(b, unit, os.ReadFile, ds...)
	if err != nil {
		t.Fatal(err)
	}
	f := r.EffectiveFlags()
	if r.Binary != "/opt/etcd/etcd" || f["data-dir"] != "/srv/etcd" || f["name"] != "dropin" || f["snapshot-count"] != "1" {
		t.Errorf("binary %q flags %v: the drop-ins were not applied as systemd does", r.Binary, f)
	}
	if !slices.Equal(r.Source.DropIns, want) {
		t.Errorf("Source.DropIns = %q", r.Source.DropIns)
	}
	// Without its drop-ins the unit runs what it says.
	r, err = ParseUnit(b, unit, os.ReadFile)
	if err != nil || r.Binary != "/usr/bin/etcd" || r.EffectiveFlags()["name"] != "base" {
		t.Errorf("unit alone: %q %v %v", r.Binary, r.EffectiveFlags(), err)
	}
}
