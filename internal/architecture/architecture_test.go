package architecture

import (
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/etcd-steward/steward"

// The floors of docs/ARCHITECTURE.md, bottom up. A package may import its
// own floor's packages only where a rule below says so, and lower floors.
var (
	// ground: small helpers with no Steward dependency at all; pkg/refusal
	// (the error type of refusals) sits here so every floor above may use it.
	ground = []string{"internal/atomicfile", "internal/filelock", "internal/proc", "internal/portcheck", "internal/crashpoint", "internal/dirmode", "internal/childenv", "internal/scratch", "internal/pagecache", "internal/editdist", "internal/subnet",
		"pkg/refusal", "api/v1alpha1"}
	// foundation: formats, stores and protocols; they know no cluster.
	foundation = []string{"pkg/progress", "pkg/spec", "pkg/pki", "pkg/catalogue", "pkg/binaries", "pkg/datadir",
		"pkg/backup", "pkg/plan", "pkg/memberrt", "pkg/memberrt/memberrttest", "pkg/agentapi", "pkg/kstorage", "pkg/kubeversion", "pkg/kmigrate", "pkg/join", "pkg/handover", "pkg/hostset", "pkg/daemon", "pkg/recoverycount",
		"pkg/memberlease", "pkg/binpush",
		"internal/localkube", "internal/ociimage", "internal/kubeimages"}
	// status: what a cluster reports (its Status, conditions and status/
	// files), read through the handle (pkg/cluster) and below every
	// operation, which may read it; the handle and the agent never do.
	status = "pkg/status"
	// operations on a cluster, each above the handle (pkg/cluster) and the
	// status, and the operations each may call.
	operations = map[string][]string{
		"pkg/rolling":     nil, // acting on members one at a time, leadership moved first
		"pkg/isolated":    nil, // members on private client ports until a write commits
		"pkg/membership":  {"pkg/rolling"},
		"pkg/maintenance": {"pkg/rolling"},
		"pkg/restore":     nil,
		"pkg/certs":       nil,           // the certificate room: renewal, CA rotation's file and host work, take-over
		"pkg/bootstrap":   {"pkg/certs"}, // the coordinator's renewal process, started by up
		"pkg/metrics":     nil,
		"pkg/backupd":     {"pkg/restore", "pkg/metrics"}, // garbage collection after a full snapshot; counting uploads and failures
		"pkg/carotate":    {"pkg/rolling", "pkg/certs"},   // member restarts one at a time, leadership moved first; the certificate work
		"pkg/recovery":    {"pkg/membership", "pkg/restore", "pkg/backupd", "pkg/metrics", "pkg/isolated"},
		"pkg/upgrade":     {"pkg/membership", "pkg/restore", "pkg/backupd", "pkg/rolling", "pkg/isolated"},
		"pkg/adopt":       {"pkg/rolling", "pkg/certs"}, // the adopt plan moves leadership before it stops the old process; take-over restarts; its certificates
		"pkg/kubeupgrade": {"pkg/upgrade"},              // the Kubernetes above etcd: what runs, the upgrade's dry run and plan (etcd upgraded first inside it)
	}
	commands = "cmd/steward/internal/command"
	// testHelpers: fixtures for the unit tests of the floors above the
	// handle; they import ground, foundation and the handle, and only
	// tests import them (the graph holds no test's imports, so any import
	// of one is refused).
	testHelpers = []string{"pkg/cluster/clustertest"}
	// operator is the floor above the operations, as the commands are:
	// the Kubernetes operator, the coordinator of clusters of pods. No
	// library below imports it; besides the operator command, the kubectl
	// plugin (the commands' kubectl) reads an EtcdCluster through it.
	operator = "pkg/operator"
	// operatorFixture: the operator's fixture for the tests and benchmarks
	// that run it in a local Kubernetes (test/e2e/operator,
	// test/bench/operator). It builds the operator's image and checks
	// its objects by the operator's own names (the pods' paths, ports,
	// labels and conditions: pkg/operator's exported constants), so it
	// imports the operator; only tests import it.
	operatorFixture = "test/operatorfixture"
)

type pkg struct {
	ImportPath string
	Imports    []string
}

// graph is every Steward package and the Steward packages it imports.
func graph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-json", module+"/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	g := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		g[name] = []string{}
		for _, imp := range p.Imports {
			if rest, ok := strings.CutPrefix(imp, module+"/"); ok {
				g[name] = append(g[name], rest)
			}
		}
	}
	return g
}

// rule decides whether from may import to; "" allows, else says why not.
func rule(from, to string) string {
	in := func(list []string, p string) bool { return slices.Contains(list, p) }
	_, toOp := operations[to]
	switch {
	case in(ground, from):
		return "the ground floor (internal/..., pkg/refusal) imports no Steward package"
	case in(testHelpers, to):
		return "test helpers are imported by tests only"
	case in(testHelpers, from):
		if in(ground, to) || in(foundation, to) || to == "pkg/cluster" {
			return ""
		}
		return "test helpers of the handle import only ground, foundation and the handle"
	case strings.HasPrefix(to, "cmd/"):
		if from == commands && strings.HasPrefix(to, commands+"/") {
			return "" // the root command assembles the tree
		}
		if strings.HasPrefix(from, commands+"/") && strings.HasPrefix(to, commands+"/") {
			return "a command never imports another command: share through cmd/steward/internal/cli or a library"
		}
		if strings.HasPrefix(from, "cmd/") {
			return ""
		}
		return "libraries never import the command tree"
	case to == operatorFixture:
		return "the operator's fixture is imported by tests only"
	case to == operator && from != commands+"/operator" && from != commands+"/kubectl" && from != operator && from != operatorFixture:
		return "only the operator command, the kubectl plugin and the tests' fixture (test/operatorfixture) import the operator (it is the floor above the operations)"
	case in(foundation, from):
		if in(ground, to) || in(foundation, to) {
			return ""
		}
		return "foundation packages know no cluster: they import only ground and foundation packages"
	case from == "pkg/agent":
		if in(ground, to) || in(foundation, to) {
			return ""
		}
		return "the agent knows member processes, not clusters: it imports no cluster handle or operation"
	case from == "pkg/cluster":
		if in(ground, to) || in(foundation, to) {
			return ""
		}
		return "the cluster handle imports no operation and not the status (they build on it) and not the agent (it talks to agents through pkg/agentapi)"
	case from == status:
		if in(ground, to) || in(foundation, to) || to == "pkg/cluster" {
			return ""
		}
		return "the status reads the cluster through the handle (pkg/cluster): it imports no operation and not the agent"
	case operations[from] != nil || isOperation(from):
		switch {
		case to == "pkg/agentapi":
			// No exception: host work (an agent's certificates, shutdown,
			// ...) is the handle's (pkg/cluster), a binary push
			// pkg/binpush's (foundation, driven by the command).
			return "operations reach members through the runtime seam (pkg/memberrt, cluster.Runtime/RuntimeFor), not the agent's client"
		case in(ground, to), in(foundation, to), to == "pkg/cluster", to == status:
			return ""
		case to == "pkg/agent" && from == "pkg/bootstrap":
			return "" // the local agent's socket path, to start and stop it
		case toOp && in(operations[from], to):
			return ""
		case toOp:
			return fmt.Sprintf("%s may call only the operations %v", path.Base(from), operations[from])
		}
		return "operations work through pkg/cluster and pkg/memberrt, not the agent's internals"
	}
	return ""
}

func isOperation(p string) bool { _, ok := operations[p]; return ok }

// TestImportRules fails on every import that breaks a rule, naming it.
func TestImportRules(t *testing.T) {
	g := graph(t)
	for from, imps := range g {
		for _, to := range imps {
			if why := rule(from, to); why != "" {
				t.Errorf("%s imports %s: %s", from, to, why)
			}
		}
	}
	// Every library package belongs to a floor: a new one must be placed
	// (here and in docs/ARCHITECTURE.md) before it is used.
	for p := range g {
		if !strings.HasPrefix(p, "pkg/") && !strings.HasPrefix(p, "internal/") && !strings.HasPrefix(p, "api/") || p == "internal/architecture" {
			continue
		}
		if !slices.Contains(ground, p) && !slices.Contains(foundation, p) && !isOperation(p) && p != "pkg/cluster" && p != status && p != "pkg/agent" && !slices.Contains(testHelpers, p) && p != operator {
			t.Errorf("package %s is on no floor: add it to internal/architecture and docs/ARCHITECTURE.md", p)
		}
	}
}

// TestRulesBite: each rule refuses the import it is about, so a rule that
// allows everything cannot pass unnoticed.
func TestRulesBite(t *testing.T) {
	for _, tc := range []struct{ from, to string }{
		{"pkg/agent", "pkg/cluster"},
		{"pkg/cluster", "pkg/membership"},
		{"pkg/cluster", "pkg/agent"},
		{commands + "/upgrade", commands + "/plan"},
		{"pkg/backup", "pkg/cluster"},
		{"internal/proc", "pkg/spec"},
		{"pkg/refusal", "pkg/spec"},
		{"pkg/membership", "pkg/restore"},
		{"pkg/restore", "pkg/backupd"},
		{"pkg/upgrade", "pkg/agent"},
		{"pkg/upgrade", "pkg/agentapi"},
		{"pkg/membership", "pkg/agentapi"},
		{"pkg/recovery", "pkg/agentapi"},
		{"pkg/restore", "pkg/agentapi"},
		{"pkg/bootstrap", "pkg/agentapi"},
		{"pkg/spec", commands + "/up"},
		{"pkg/upgrade", "pkg/certs"},
		{"pkg/cluster", "pkg/certs"},
		{"pkg/agent", "pkg/certs"},
		{"pkg/cluster", "pkg/status"},
		{"pkg/agent", "pkg/status"},
		{"pkg/spec", "pkg/status"},
		{"pkg/status", "pkg/membership"},
		{"pkg/status", "pkg/agent"},
		{"pkg/isolated", "pkg/agentapi"},
		{"pkg/isolated", "pkg/membership"},
		{"pkg/binpush", "pkg/cluster"},
		{"pkg/cluster", "pkg/isolated"},
		{"pkg/status", "pkg/cluster/clustertest"},
		{"pkg/certs", "pkg/cluster/clustertest"},
		{"pkg/cluster/clustertest", "pkg/status"},
		{"test/harness", "pkg/operator"},
		{"pkg/status", "pkg/operator"},
		{"test/harness", "test/operatorfixture"},
	} {
		if rule(tc.from, tc.to) == "" {
			t.Errorf("%s importing %s is allowed; the rules say it must not be", tc.from, tc.to)
		}
	}
	for _, tc := range []struct{ from, to string }{
		{commands, commands + "/up"},
		{commands + "/up", "pkg/bootstrap"},
		{"pkg/recovery", "pkg/membership"},
		{"pkg/membership", "pkg/cluster"},
		{"pkg/agent", "pkg/datadir"},
		{"pkg/spec", "pkg/refusal"},
		{"pkg/agent", "pkg/refusal"},
		{"pkg/upgrade", "pkg/memberrt"},
		{"pkg/cluster", "pkg/agentapi"},
		{"pkg/carotate", "pkg/certs"},
		{"pkg/adopt", "pkg/certs"},
		{"pkg/status", "pkg/cluster"},
		{"pkg/status", "pkg/agentapi"},
		{"pkg/upgrade", "pkg/status"},
		{"pkg/certs", "pkg/status"},
		{"pkg/upgrade", "pkg/isolated"},
		{"pkg/recovery", "pkg/isolated"},
		{"pkg/binpush", "pkg/agentapi"},
		{"pkg/cluster/clustertest", "pkg/cluster"},
		{"test/operatorfixture", "pkg/operator"},
		{"test/operatorfixture", "test/harness"},
	} {
		if why := rule(tc.from, tc.to); why != "" {
			t.Errorf("%s importing %s is refused (%s); the rules allow it", tc.from, tc.to, why)
		}
	}
}
