// Command testtimes reads `go test -json` output on its standard input.
// While it reads, it prints what a reader of `go test` expects (each
// top-level test's result line, each package's ok/FAIL line, the whole
// output of every failed test, and any line that is not JSON, such as a
// build error); at the end it prints, as Markdown tables for
// docs/testing.md, each package's wall time and the slowest top-level
// tests. A test's time is its own or, when larger, the sum of its direct
// subtests' (a test whose subtests run in parallel reports about 0 s, its
// function having returned before they ran). -save keeps the events in a
// file.
//
//	go test -json ./test/... | go run ./hack/testtimes -save e2e.json
//	go run ./hack/testtimes -quiet -n 20 < e2e.json
//
// -progress-only prints the progress and no tables: hack/e2e.sh runs two
// go test processes side by side, each through its own testtimes, and
// summarizes the events of both once at the end.
//
// Its exit code is 0 when it could read its input: the caller takes the
// suite's result from go test (pipefail), so no failure is hidden here.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is the part of a test2json event this command reads.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type result struct {
	pkg, test, action string
	elapsed           float64
}

func main() {
	n := flag.Int("n", 20, "how many of the slowest tests to list")
	save := flag.String("save", "", "also write the events read to this file")
	quiet := flag.Bool("quiet", false, "print the tables only")
	progressOnly := flag.Bool("progress-only", false, "print the progress only, not the tables (hack/e2e.sh: one summary of several runs)")
	flag.Parse()
	in := io.Reader(os.Stdin)
	if *save != "" {
		f, err := os.OpenFile(*save, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testtimes:", err)
			os.Exit(1)
		}
		defer f.Close()
		in = io.TeeReader(in, f)
	}
	progress := io.Writer(os.Stdout)
	if *quiet {
		progress = io.Discard
	}
	tables := io.Writer(os.Stdout)
	if *progressOnly {
		tables = io.Discard
	}
	if err := run(in, progress, tables, *n); err != nil {
		fmt.Fprintln(os.Stderr, "testtimes:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, progress, out io.Writer, n int) error {
	var tests, pkgs []result
	// outputs holds each running test's output until its result: printed
	// when it fails, dropped when it passes.
	outputs := map[[2]string]*strings.Builder{}
	// subtests sums each top-level test's direct subtests' times: a test
	// whose subtests are parallel reports about 0 s itself, as its
	// function returned before they ran.
	subtests := map[[2]string]float64{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		b := sc.Bytes()
		var e event
		if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &e) != nil {
			fmt.Fprintf(progress, "%s\n", b) // go test's own lines (a build error)
			continue
		}
		key := [2]string{e.Package, e.Test}
		switch e.Action {
		case "output":
			if e.Test == "" {
				if strings.HasPrefix(e.Output, "ok ") || strings.HasPrefix(e.Output, "FAIL") || strings.HasPrefix(e.Output, "panic") {
					fmt.Fprint(progress, e.Output)
				}
				continue
			}
			if outputs[key] == nil {
				outputs[key] = &strings.Builder{}
			}
			outputs[key].WriteString(e.Output)
			if strings.HasPrefix(e.Output, "--- ") && !strings.Contains(e.Test, "/") {
				fmt.Fprintf(progress, "%s: %s", short(e.Package), e.Output)
			}
			continue
		case "pass", "fail", "skip":
		default:
			continue
		}
		if e.Action == "fail" && e.Test != "" && outputs[key] != nil {
			fmt.Fprintf(progress, "=== output of %s %s:\n%s", short(e.Package), e.Test, outputs[key].String())
		}
		delete(outputs, key)
		r := result{pkg: e.Package, test: e.Test, action: e.Action, elapsed: e.Elapsed}
		switch {
		case e.Test == "":
			pkgs = append(pkgs, r)
		case !strings.Contains(e.Test, "/"):
			tests = append(tests, r)
		case strings.Count(e.Test, "/") == 1:
			top := [2]string{e.Package, e.Test[:strings.Index(e.Test, "/")]}
			subtests[top] += e.Elapsed
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	// A test still running when its binary died (a timeout's panic) has
	// no result event: its output is all there is.
	for key, o := range outputs {
		if !strings.Contains(key[1], "/") {
			fmt.Fprintf(progress, "=== output of %s %s (no result: the test binary died):\n%s", short(key[0]), key[1], o.String())
		}
	}
	if len(tests) == 0 {
		return fmt.Errorf("no test results in the input: give it the output of go test -json")
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].elapsed > pkgs[j].elapsed })
	fmt.Fprintln(out, "\n| package | result | wall (s) |")
	fmt.Fprintln(out, "|---|---|---:|")
	for _, p := range pkgs {
		fmt.Fprintf(out, "| %s | %s | %.0f |\n", short(p.pkg), p.action, p.elapsed)
	}
	for i, t := range tests {
		tests[i].elapsed = max(t.elapsed, subtests[[2]string{t.pkg, t.test}])
	}
	var total float64
	for _, t := range tests {
		total += t.elapsed
	}
	sort.Slice(tests, func(i, j int) bool {
		if tests[i].elapsed != tests[j].elapsed {
			return tests[i].elapsed > tests[j].elapsed
		}
		return tests[i].pkg+tests[i].test < tests[j].pkg+tests[j].test
	})
	fmt.Fprintf(out, "\n%d tests, %.0f s of test time in all (a sum: tests run side by side overlap)\n\n", len(tests), total)
	fmt.Fprintln(out, "| # | test | package | result | time (s) | share |")
	fmt.Fprintln(out, "|---:|---|---|---|---:|---:|")
	for i, t := range tests[:min(n, len(tests))] {
		fmt.Fprintf(out, "| %d | `%s` | %s | %s | %.1f | %.1f%% |\n", i+1, t.test, short(t.pkg), t.action, t.elapsed, 100*t.elapsed/total)
	}
	return nil
}

// short drops the module path.
func short(pkg string) string {
	if i := strings.Index(pkg, "/test/"); i >= 0 {
		return pkg[i+1:]
	}
	return pkg
}
