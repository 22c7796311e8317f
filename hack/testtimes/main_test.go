package main

import (
	"strings"
	"testing"
)

// TestRun: a failed test's output is printed whole, a passed one's only
// as its result line; the tables rank top-level tests by time; input
// without results is an error.
func TestRun(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"output","Package":"m/test/e2e/core","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"m/test/e2e/core","Test":"TestA","Output":"    a_test.go:9: boom\n"}`,
		`{"Action":"output","Package":"m/test/e2e/core","Test":"TestA","Output":"--- FAIL: TestA (3.00s)\n"}`,
		`{"Action":"fail","Package":"m/test/e2e/core","Test":"TestA","Elapsed":3}`,
		`{"Action":"output","Package":"m/test/e2e/core","Test":"TestB","Output":"    b_test.go:9: quiet\n"}`,
		`{"Action":"output","Package":"m/test/e2e/core","Test":"TestB","Output":"--- PASS: TestB (9.00s)\n"}`,
		`{"Action":"pass","Package":"m/test/e2e/core","Test":"TestB/sub","Elapsed":8}`,
		`{"Action":"pass","Package":"m/test/e2e/core","Test":"TestB","Elapsed":9}`,
		`{"Action":"pass","Package":"m/test/e2e/core","Test":"TestC/a","Elapsed":1.5}`,
		`{"Action":"pass","Package":"m/test/e2e/core","Test":"TestC/b","Elapsed":1.5}`,
		`{"Action":"pass","Package":"m/test/e2e/core","Test":"TestC","Elapsed":0}`,
		`# m/cmd/x`,
		`{"Action":"fail","Package":"m/test/e2e/core","Elapsed":12}`,
	}, "\n")
	var progress, out strings.Builder
	if err := run(strings.NewReader(in), &progress, &out, 20); err != nil {
		t.Fatal(err)
	}
	p := progress.String()
	for _, want := range []string{"a_test.go:9: boom", "test/e2e/core: --- PASS: TestB", "# m/cmd/x"} {
		if !strings.Contains(p, want) {
			t.Errorf("progress lacks %q:\n%s", want, p)
		}
	}
	if strings.Contains(p, "quiet") {
		t.Errorf("a passed test's output was printed:\n%s", p)
	}
	o := out.String()
	if !strings.Contains(o, "| 1 | `TestB` | test/e2e/core | pass | 9.0 |") || !strings.Contains(o, "| 2 | `TestA` | test/e2e/core | fail | 3.0 |") || !strings.Contains(o, "| 3 | `TestC` | test/e2e/core | pass | 3.0 |") || strings.Contains(o, "TestB/sub") {
		t.Errorf("tables:\n%s", o)
	}
	if err := run(strings.NewReader("hello\n"), &progress, &out, 20); err == nil {
		t.Error("input without results accepted")
	}
}
