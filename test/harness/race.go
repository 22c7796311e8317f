package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The race detector: Binary builds steward with -race unless Race is false,
// and the harness fails a test whose Steward processes report a data race,
// on the CLI's stderr (Run) or in the logs under the Steward directory
// (cleanup). A race-built program prints each race as it finds it, keeps
// running (see GORACE) and exits with code 66 at the end when it found any.

// Race says whether Binary builds steward with the race detector: on
// unless STEWARD_TEST_RACE=0. The benchmarks (test/bench) set it to false in
// their TestMain: they measure Steward's speed.
var Race = os.Getenv("STEWARD_TEST_RACE") != "0"

// GORACE is the race detector's options for every steward process of the
// tests: Binary puts it in the test process's environment, which they
// inherit, unless GORACE is set there already:
//   - halt_on_error=0 (the default, made explicit): a race is reported and
//     the process goes on, so one race does not hide the next, nor turn
//     into a different failure;
//   - atexit_sleep_ms=0: a race-built program otherwise sleeps 1 s before
//     it exits (to catch races of goroutines still running at exit), which
//     made every CLI call a second longer: minutes over the suite, which
//     runs hundreds of `steward status`. Long-lived processes (the agent)
//     lose nothing by it.
//
// exitcode is left at 66.
const GORACE = "halt_on_error=0 atexit_sleep_ms=0"

// raceExitCode is the exit code of a race-built program that found a race
// (GORACE's exitcode, left at its default).
const raceExitCode = 66

// raceMarker is the line that starts every report of the race detector.
const raceMarker = "WARNING: DATA RACE"

// raceRule is the line above and below each report.
const raceRule = "=================="

// raceExcerptLines is how much of the race reports a failure shows.
const raceExcerptLines = 60

// RaceReports returns the data race reports in text (a process's stderr or
// log), each from the rule line above its "WARNING: DATA RACE" to the rule
// line that ends it (or the end of text, for a process killed while
// printing).
func RaceReports(text string) []string {
	lines := strings.Split(text, "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != raceMarker {
			continue
		}
		start := i
		if i > 0 && strings.TrimSpace(lines[i-1]) == raceRule {
			start = i - 1
		}
		end := len(lines)
		for j := i + 1; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) == raceRule {
				end = j + 1
				break
			}
		}
		out = append(out, strings.Join(lines[start:end], "\n"))
		i = end - 1
	}
	return out
}

// raceSummary is one line per distinct race in reports: each access with
// the function and file:line at the top of its stack, e.g.
//
//	Write by cluster.backupRound.func2() at continuous.go:252; Previous read by cluster.backupRound.func1() at continuous.go:242 (3 reports)
//
// so a failure names every race even when the excerpt shows only the first.
func raceSummary(reports []string) string {
	var order []string
	count := map[string]int{}
	for _, rep := range reports {
		lines := strings.Split(rep, "\n")
		var parts []string
		for i, l := range lines {
			l = strings.TrimSpace(l)
			access, _, ok := strings.Cut(l, " at 0x")
			if !ok || i+2 >= len(lines) {
				continue
			}
			fn := strings.TrimSpace(lines[i+1])
			fn = fn[strings.LastIndex(fn, "/")+1:]
			loc := strings.TrimSpace(lines[i+2])
			if j := strings.LastIndex(loc, " +0x"); j >= 0 {
				loc = loc[:j]
			}
			loc = filepath.Base(loc)
			parts = append(parts, fmt.Sprintf("%s by %s at %s", access, fn, loc))
		}
		key := strings.Join(parts, "; ")
		if key == "" {
			key = "(a report without stacks)"
		}
		if count[key] == 0 {
			order = append(order, key)
		}
		count[key]++
	}
	var b strings.Builder
	for _, k := range order {
		fmt.Fprintf(&b, "  - %s", k)
		if count[k] > 1 {
			fmt.Fprintf(&b, " (%d reports)", count[k])
		}
		b.WriteString("\n")
	}
	return b.String()
}

// raceMessage is what a failure shows of reports: the summary, then the
// first max lines of the reports.
func raceMessage(reports []string, max int) string {
	return raceSummary(reports) + raceExcerpt(reports, max)
}

// raceExcerpt joins reports and keeps the first max lines.
func raceExcerpt(reports []string, max int) string {
	lines := strings.Split(strings.Join(reports, "\n"), "\n")
	if len(lines) > max {
		more := len(lines) - max
		lines = append(lines[:max], fmt.Sprintf("... (%d more lines)", more))
	}
	return strings.Join(lines, "\n")
}

// stewardModule prefixes the functions of Steward's packages in a stack.
const stewardModule = "github.com/etcd-steward/steward/"

// stewardFrame reports whether a race report has a stack frame in
// Steward's code other than the command layer: in a member's process (the
// embedded etcd server, `steward etcd`), Steward's code is only that layer
// (cmd/steward, internal/cmd) around etcd's.
func stewardFrame(report string) bool {
	for _, l := range strings.Split(report, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, stewardModule) {
			continue
		}
		rest := strings.TrimPrefix(l, stewardModule)
		if strings.HasPrefix(rest, "internal/cmd") || strings.HasPrefix(rest, "cmd/") {
			continue
		}
		return true
	}
	return false
}

// LogRaces are the data race reports in the logs of a Steward directory
// (DIR/logs/*.log), by log file name.
type LogRaces struct {
	// Steward holds reports that fail a test: every one in an agent's log
	// (agent.log, agent-NAME.log: the agent's stderr), and those in a
	// member's log with a frame in Steward's own packages.
	Steward map[string][]string
	// Etcd holds reports in a member's log that involve only etcd's code
	// (and Steward's command layer around it): races in etcd itself, seen
	// only when a member runs the embedded server of a race-built steward.
	// They do not fail Steward's tests.
	Etcd map[string][]string
}

// ScanLogRaces reads every log under dir/logs for data race reports.
func ScanLogRaces(dir string) (LogRaces, error) {
	r := LogRaces{Steward: map[string][]string{}, Etcd: map[string][]string{}}
	files, err := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	if err != nil {
		return r, err
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return r, err
		}
		if !strings.Contains(string(b), raceMarker) {
			continue
		}
		name := filepath.Base(f)
		agent := name == "agent.log" || strings.HasPrefix(name, "agent-")
		for _, rep := range RaceReports(string(b)) {
			if agent || stewardFrame(rep) {
				r.Steward[name] = append(r.Steward[name], rep)
			} else {
				r.Etcd[name] = append(r.Etcd[name], rep)
			}
		}
	}
	return r, nil
}

// checkLogRaces fails the test for every data race of Steward in the logs
// of its Steward directory, and notes etcd's own.
func (e *Env) checkLogRaces() { e.checkLogRacesIn(e.Dir) }

// checkLogRacesIn does checkLogRaces for another Steward directory (a
// host's, in a multi-host test).
func (e *Env) checkLogRacesIn(dir string) {
	r, err := ScanLogRaces(dir)
	if err != nil {
		e.TB.Errorf("cleanup: scan the logs for data races: %v", err)
	}
	for _, name := range sortedKeys(r.Steward) {
		reps := r.Steward[name]
		e.TB.Errorf("data race: %s reports %d data race(s) in Steward (race-built steward; %s):\n%s",
			filepath.Join(dir, "logs", name), len(reps), raceHint, raceMessage(reps, raceExcerptLines))
	}
	for _, name := range sortedKeys(r.Etcd) {
		reps := r.Etcd[name]
		e.TB.Logf("note: %s reports %d data race(s) in etcd's own code, not Steward's (a member ran the embedded etcd server of the race-built steward, which members should not: the test store holds every version):\n%s",
			filepath.Join(dir, "logs", name), len(reps), raceMessage(reps, 20))
	}
}

// checkStderrRaces fails the test when a steward command reported a data
// race on stderr.
func (e *Env) checkStderrRaces(args []string, stderr string, exitCode int) {
	e.TB.Helper()
	if !strings.Contains(stderr, raceMarker) {
		return
	}
	reps := RaceReports(stderr)
	exit := ""
	if exitCode == raceExitCode {
		exit = fmt.Sprintf("; it exited with code %d, the race detector's, whatever the command's outcome", raceExitCode)
	}
	e.TB.Errorf("data race: `steward %s` reported %d data race(s) on stderr (race-built steward; %s)%s:\n%s",
		strings.Join(args, " "), len(reps), raceHint, exit, raceMessage(reps, raceExcerptLines))
}

const raceHint = "see docs/testing.md, Race detector"

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
