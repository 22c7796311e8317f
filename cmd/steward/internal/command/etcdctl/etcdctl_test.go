package etcdctl

import (
	"slices"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/spec"
)

func testCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	dir := t.TempDir()
	port := 20000
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 2, Version: "3.6.16", StewardDir: dir, Host: "127.0.0.1",
		FreePort: func() (int, error) { port++; return port, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return &cluster.Cluster{Dir: dir, Spec: s}
}

func get(env []string, k string) (string, int) {
	v, n := "", 0
	for _, kv := range env {
		if key, val, _ := strings.Cut(kv, "="); key == k {
			v, n = val, n+1
		}
	}
	return v, n
}

// TestEnv: the cluster's endpoints and certificate files are added as
// ETCDCTL_* variables, each unless the user set the variable or passes
// its flag (etcdctl refuses a flag shadowing a variable); no secret.
func TestEnv(t *testing.T) {
	c := testCluster(t)
	ca, cert, key := c.Spec.ClientFiles(c.Dir)
	env := Env(c, []string{"PATH=/bin"}, []string{"get", "k"})
	for k, want := range map[string]string{
		"ETCDCTL_ENDPOINTS": strings.Join(c.Spec.ClientURLs(), ","),
		"ETCDCTL_CACERT":    ca, "ETCDCTL_CERT": cert, "ETCDCTL_KEY": key,
		"PATH": "/bin",
	} {
		if v, n := get(env, k); v != want || n != 1 {
			t.Errorf("%s = %q (%d times), want %q once", k, v, n, want)
		}
	}

	// The user's variable wins, and is not repeated.
	env = Env(c, []string{"ETCDCTL_ENDPOINTS=https://elsewhere:2379"}, nil)
	if v, n := get(env, "ETCDCTL_ENDPOINTS"); v != "https://elsewhere:2379" || n != 1 {
		t.Errorf("user's ETCDCTL_ENDPOINTS: %q (%d times)", v, n)
	}
	// A flag on the command line: its variable is left out.
	env = Env(c, nil, []string{"--endpoints=https://x:1", "get", "k", "--cacert", "/ca"})
	for _, k := range []string{"ETCDCTL_ENDPOINTS", "ETCDCTL_CACERT"} {
		if _, n := get(env, k); n != 0 {
			t.Errorf("%s set although its flag is passed", k)
		}
	}
	if _, n := get(env, "ETCDCTL_KEY"); n != 1 {
		t.Error("ETCDCTL_KEY left out although --key is not passed")
	}
	// After "--" an argument is etcdctl's value, not a flag.
	if _, n := get(Env(c, nil, []string{"put", "--", "--endpoints"}), "ETCDCTL_ENDPOINTS"); n != 1 {
		t.Error("an argument after -- counted as the --endpoints flag")
	}

	// TLS off: endpoints only.
	c.Spec.TLS.Disabled = true
	env = Env(c, nil, nil)
	if _, n := get(env, "ETCDCTL_CERT"); n != 0 || len(env) != 1 {
		t.Errorf("TLS off: %v", env)
	}
}

func TestSplitDir(t *testing.T) {
	for _, tc := range []struct {
		args, rest []string
		dir        string
	}{
		{[]string{"get", "k", "--dir", "/d"}, []string{"get", "k"}, "/d"},
		{[]string{"--dir=/d", "put", "k", "v"}, []string{"put", "k", "v"}, "/d"},
		{[]string{"get", "--prefix", "k"}, []string{"get", "--prefix", "k"}, ""},
	} {
		dir, rest, err := splitDir(tc.args)
		if err != nil || dir != tc.dir || !slices.Equal(rest, tc.rest) {
			t.Errorf("splitDir(%q) = %q, %q, %v; want %q, %q", tc.args, dir, rest, err, tc.dir, tc.rest)
		}
	}
	if _, _, err := splitDir([]string{"get", "--dir"}); err == nil {
		t.Error("--dir without a value accepted")
	}
}
