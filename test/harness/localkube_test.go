package harness

import "testing"

// TestBenchSelects: LocalKubeBenchMain brings a cluster up for the
// patterns go test would run one of the package's benchmarks for, and
// only for those.
func TestBenchSelects(t *testing.T) {
	names := []string{"BenchmarkOperatorQuorumLoss", "BenchmarkOperatorScale3To5"}
	for _, tc := range []struct {
		pattern string
		want    bool
	}{
		{"", false},
		{".", true},
		{"BenchmarkOperator", true},
		{"BenchmarkOperatorScale3To5$", true},
		{"QuorumLoss", true},
		{"BenchmarkHostsQuorumLossRecovery", false},
		{"BenchmarkHostsQuorumLossRecovery$", false},
		{"BenchmarkHostsQuorumLossRecovery/three-hosts/auto", false},
		{"BenchmarkUp|BenchmarkOperatorScale", true},
		{"BenchmarkUp|BenchmarkRestore", false},
		{"BenchmarkUp/Operator", false},
		{"Benchmark(Up|OperatorScale)", true},
		{"Benchmark[O]perator/x", true},
		{"BenchmarkUp/[/]OperatorScale", false},
	} {
		if got := BenchSelects(tc.pattern, names...); got != tc.want {
			t.Errorf("BenchSelects(%q) = %v, want %v", tc.pattern, got, tc.want)
		}
	}
}
