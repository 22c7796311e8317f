package agent

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"

	agentpkg "github.com/etcd-steward/steward/pkg/agent"
)

// TestPodFlagRefusals: bad pod flags are refused with one message naming
// the flag and what to give, before anything starts.
func TestPodFlagRefusals(t *testing.T) {
	for _, tc := range []struct {
		f    podFlags
		want string
	}{
		{podFlags{lease: "etcd-0"}, `a lease is named NAMESPACE/NAME: "etcd-0": give --lease NAMESPACE/NAME, e.g. --lease default/etcd-0`},
		{podFlags{lease: "default/Etcd_0"}, `the name "Etcd_0" may hold only lower-case letters`},
		{podFlags{kubeconfig: "/k"}, "--kubeconfig is the API server of --lease: give --lease NAMESPACE/NAME too"},
	} {
		err := tc.f.check()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("check(%+v) = %v, want it to say %q", tc.f, err, tc.want)
		}
	}
	if err := (&podFlags{lease: "default/etcd-0", kubeconfig: "/k", probe: "127.0.0.1:0"}).check(); err != nil {
		t.Errorf("good flags refused: %v", err)
	}

	a := agentpkg.New(agentpkg.Options{Dir: t.TempDir()})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f := podFlags{probe: ln.Addr().String()}
	if _, err := f.start(t.Context(), a, slog.Default()); err == nil || !strings.Contains(err.Error(), "--probe-address "+ln.Addr().String()+": probe address: listen tcp") || !strings.HasSuffix(err.Error(), "; give a free HOST:PORT") {
		t.Errorf("a probe address in use: %v", err)
	}
	f = podFlags{probe: "127.0.0.1:0", lease: "default/etcd-0", kubeconfig: filepath.Join(t.TempDir(), "missing")}
	if _, err := f.start(context.Background(), a, slog.Default()); err == nil || !strings.Contains(err.Error(), "--lease default/etcd-0: kubeconfig") || !strings.Contains(err.Error(), "give --kubeconfig FILE") {
		t.Errorf("a missing kubeconfig: %v", err)
	}
}

// TestPodLeaseFromEnv: in a pod the lease is POD_NAMESPACE/POD_NAME unless
// --lease names one; without them, one error naming both variables.
func TestPodLeaseFromEnv(t *testing.T) {
	env := map[string]string{"POD_NAMESPACE": "prod", "POD_NAME": "main-2"}
	f := podFlags{}
	if err := f.usePod(func(k string) string { return env[k] }); err != nil || f.lease != "prod/main-2" {
		t.Errorf("usePod = %v, lease %q", err, f.lease)
	}
	f = podFlags{lease: "other/x"}
	if err := f.usePod(func(k string) string { return env[k] }); err != nil || f.lease != "other/x" {
		t.Errorf("usePod with --lease = %v, lease %q", err, f.lease)
	}
	f = podFlags{}
	if err := f.usePod(func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "POD_NAMESPACE and POD_NAME not set") {
		t.Errorf("usePod without the variables: %v", err)
	}
}
