// Package operator_test holds the operator's benchmarks of issue 29
// (docs/benchmarks.md, "Operator in pods against hosts"): Steward's
// operator, as a pod of a local Kubernetes of three nodes in three zones
// (internal/localkube), installed and driven through
// test/operatorfixture, with the same measurement on hosts in the same
// run where the issue names one (test/bench/hostsbench): a quorum loss
// and its automatic recovery, and an upgrade and rollback under a
// writer. `make bench` runs them with the others; `make bench
// BENCH=BenchmarkOperator` runs them alone. Every figure is a reported
// metric (b.ReportMetric).
package operator_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/test/harness"
)

// benchmarks are the package's benchmarks: TestMain brings the local
// Kubernetes up only when -bench selects one of them.
var benchmarks = []string{
	"BenchmarkOperatorMemberPodDeleted",
	"BenchmarkOperatorQuorumLoss",
	"BenchmarkOperatorScale3To5",
	"BenchmarkOperatorUpgradeRollback",
	"BenchmarkOperatorResources",
}

// TestMain builds steward without the race detector (the hosts'
// baselines run it; the operator's image is built without it anyway) and
// brings up the package's local Kubernetes, of three nodes, only when a
// benchmark of the package is selected (harness.LocalKubeBenchMain): a
// `make bench` of another benchmark does not pay for it.
func TestMain(m *testing.M) {
	harness.Race = false
	os.Exit(harness.LocalKubeBenchMain(m, 3, benchmarks...))
}

// TestBenchmarksListed: every benchmark of the package is in benchmarks:
// one left out would, selected alone, run without a cluster and fail.
func TestBenchmarksListed(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Benchmark") && !slices.Contains(benchmarks, fn.Name.Name) {
				t.Errorf("%s (%s) is not in benchmarks (main_test.go)", fn.Name.Name, f)
			}
		}
	}
}
