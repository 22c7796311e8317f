package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// agentRace is a report as the race detector prints it, from a race in the
// agent's member supervision.
const agentRace = `==================
WARNING: DATA RACE
Write at 0x00c0001a4f40 by goroutine 41:
  github.com/etcd-steward/steward/pkg/agent.(*Agent).PutMember()
      /src/steward/pkg/agent/agent.go:293 +0x804
  github.com/etcd-steward/steward/pkg/agent.(*Agent).Handler.func4()
      /src/steward/pkg/agent/server.go:42 +0x2a4

Previous read at 0x00c0001a4f40 by goroutine 37:
  github.com/etcd-steward/steward/pkg/agent.(*member).loop()
      /src/steward/pkg/agent/member.go:187 +0x84

Goroutine 41 (running) created at:
  net/http.(*Server).Serve()
      /usr/local/go/src/net/http/server.go:3454 +0x8c4
==================`

// etcdRace is a race inside etcd's server, as a member running the
// embedded server of a race-built steward would print it.
const etcdRace = `==================
WARNING: DATA RACE
Read at 0x00c000532a10 by goroutine 112:
  go.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).applyAll()
      /root/go/pkg/mod/go.etcd.io/etcd/server/v3@v3.6.16/etcdserver/server.go:1010 +0x64

Previous write at 0x00c000532a10 by main goroutine:
  go.etcd.io/etcd/server/v3/etcdmain.startEtcdOrProxyV2()
      /root/go/pkg/mod/go.etcd.io/etcd/server/v3@v3.6.16/etcdmain/etcd.go:120 +0x1a4
  github.com/etcd-steward/steward/internal/cmd/etcd.NewCommand.func1()
      /src/steward/internal/cmd/etcd/etcd.go:24 +0x64
  main.main()
      /src/steward/cmd/steward/main.go:13 +0x2c
==================`

const zapLines = `{"level":"info","ts":"2026-11-23T11:40:00.000Z","caller":"embed/etcd.go:140","msg":"configuring peer listeners"}
{"level":"info","ts":"2026-11-23T11:40:00.100Z","caller":"etcdserver/server.go:800","msg":"started"}
`

func TestRaceReports(t *testing.T) {
	text := "time=... level=INFO msg=\"agent running\"\n" + agentRace + "\nmore log\n" + agentRace + "\nFound 2 data race(s)\n"
	reps := RaceReports(text)
	if len(reps) != 2 {
		t.Fatalf("found %d reports, want 2:\n%q", len(reps), reps)
	}
	if reps[0] != agentRace {
		t.Fatalf("report:\n%s\nwant:\n%s", reps[0], agentRace)
	}
	if got := RaceReports(zapLines + "WARNING: something else\n"); len(got) != 0 {
		t.Fatalf("clean log: %q", got)
	}
	// A process killed while printing: the report runs to the end.
	cut := agentRace[:strings.Index(agentRace, "Goroutine 41")]
	if got := RaceReports("x\n" + cut); len(got) != 1 || !strings.Contains(got[0], "PutMember") {
		t.Fatalf("cut report: %q", got)
	}
	sum := raceSummary(append(reps, etcdRace))
	want := "  - Write by agent.(*Agent).PutMember() at agent.go:293; Previous read by agent.(*member).loop() at member.go:187 (2 reports)\n" +
		"  - Read by etcdserver.(*EtcdServer).applyAll() at server.go:1010; Previous write by etcdmain.startEtcdOrProxyV2() at etcd.go:120\n"
	if sum != want {
		t.Fatalf("summary:\n%s\nwant:\n%s", sum, want)
	}
	long := strings.Repeat(agentRace+"\n", 10)
	if ex := raceExcerpt(RaceReports(long), raceExcerptLines); strings.Count(ex, "\n") != raceExcerptLines || !strings.HasSuffix(ex, "more lines)") {
		t.Fatalf("excerpt of %d lines:\n%s", strings.Count(ex, "\n"), ex)
	}
}

func TestScanLogRaces(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(logs, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("agent.log", "time=... level=INFO msg=\"agent running\"\n")
	write("etcd-1.log", zapLines)
	r, err := ScanLogRaces(dir)
	if err != nil || len(r.Steward) != 0 || len(r.Etcd) != 0 {
		t.Fatalf("clean logs: %+v, %v", r, err)
	}

	write("agent.log", "time=... level=INFO msg=\"agent running\"\n"+agentRace+"\n")
	write("agent-second.log", agentRace+"\n")
	write("etcd-2.log", zapLines+etcdRace+"\n"+zapLines)
	// A member log with Steward's code in the race (a member that is not
	// etcd's server, should there ever be one) fails too.
	write("etcd-3.log", strings.Replace(etcdRace, "go.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).applyAll()", "github.com/etcd-steward/steward/pkg/backup.(*Recorder).flush()", 1))
	write("notes.txt", agentRace) // not a log
	r, err = ScanLogRaces(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := sortedKeys(r.Steward); strings.Join(got, " ") != "agent-second.log agent.log etcd-3.log" {
		t.Fatalf("Steward's races in %v", got)
	}
	if got := sortedKeys(r.Etcd); strings.Join(got, " ") != "etcd-2.log" {
		t.Fatalf("etcd's races in %v", got)
	}

	// The cleanup check fails the test for Steward's races only.
	tb := &recordingTB{TB: t}
	(&Env{TB: tb, Dir: dir}).checkLogRaces()
	if len(tb.errors) != 3 || len(tb.logs) != 1 {
		t.Fatalf("errors %q, notes %q; want 3 errors (agent.log, agent-second.log, etcd-3.log) and 1 note (etcd-2.log)", tb.errors, tb.logs)
	}
	for _, e := range tb.errors {
		if !strings.HasPrefix(e, "data race: ") || !strings.Contains(e, "WARNING: DATA RACE") {
			t.Fatalf("error %q does not say data race, or lacks the report", e)
		}
	}

	tb = &recordingTB{TB: t}
	env := &Env{TB: tb, Dir: dir}
	env.checkStderrRaces([]string{"status"}, "Error: boom\n", 1)
	if len(tb.errors) != 0 {
		t.Fatalf("a clean stderr failed the test: %q", tb.errors)
	}
	env.checkStderrRaces([]string{"status", "-o", "json"}, agentRace+"\nFound 1 data race(s)\n", 66)
	if len(tb.errors) != 1 || !strings.Contains(tb.errors[0], "data race: `steward status -o json` reported 1 data race(s)") ||
		!strings.Contains(tb.errors[0], "exited with code 66") {
		t.Fatalf("errors %q", tb.errors)
	}
}

// TestRaceReportsOfARealRace builds a racy program with -race, as Binary
// builds steward, and finds its report (GORACE as Run sets it: the program
// runs on, and exits 66).
func TestRaceReportsOfARealRace(t *testing.T) {
	dir := t.TempDir()
	prog := `package main

import "fmt"

func main() {
	n := 0
	done := make(chan bool)
	go func() { n++; done <- true }()
	n++
	<-done
	fmt.Println("still running after the race:", n)
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(prog), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module racy\n\ngo 1.22\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-race", "-o", "racy", ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -race (the end-to-end tests need it: cgo and a C compiler): %v\n%s", err, out)
	}
	var so, se strings.Builder
	run := exec.Command(filepath.Join(dir, "racy"))
	run.Env = append(os.Environ(), "GORACE="+GORACE)
	run.Stdout, run.Stderr = &so, &se
	err := run.Run()
	if exitCode(err) != raceExitCode || !strings.Contains(so.String(), "still running") {
		t.Fatalf("exit %v, stdout %q; want exit code %d after running to the end", err, so.String(), raceExitCode)
	}
	reps := RaceReports(se.String())
	if len(reps) != 1 || !strings.Contains(reps[0], "main.main") {
		t.Fatalf("reports %q in stderr:\n%s", reps, se.String())
	}
	if got := raceExit(err, se.String()); !strings.Contains(got, "data race") {
		t.Fatalf("raceExit: %q", got)
	}
}

// recordingTB records what the harness reports instead of failing.
type recordingTB struct {
	testing.TB
	errors, logs []string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Errorf(format string, a ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, a...))
}
func (r *recordingTB) Logf(format string, a ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, a...))
}
