package core_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
)

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestBadInput: each bad input gets one clear error and changes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	v := binaries.EmbeddedVersion()

	t.Run("invalid spec", func(t *testing.T) {
		t.Parallel()
		e := harness.New(t)
		e.WriteSpec(3, v, func(s *spec.Cluster) {
			s.Members[1].Name = s.Members[0].Name
			s.Members[2].PeerURL = "https://127.0.0.1:notaport"
			s.Members[2].ClientURL = s.Members[0].ClientURL
		})
		out := e.MustFail("up")
		for _, want := range []string{"is listed twice", "notaport", "address already used by"} {
			if !strings.Contains(out, want) {
				t.Errorf("error does not mention %q:\n%s", want, out)
			}
		}
		if exists(filepath.Join(e.Dir, "run", "agent.sock")) || exists(filepath.Join(e.Dir, "members")) {
			t.Error("an invalid spec started something")
		}
	})

	t.Run("unknown version", func(t *testing.T) {
		t.Parallel()
		e := harness.New(t)
		out := e.MustFail("up", "--version", "3.4.99", "--binary-store", e.Store)
		if !strings.Contains(out, "3.4.99 is not in the binary store") {
			t.Errorf("unknown version: %s", out)
		}
		if exists(filepath.Join(e.Dir, spec.FileName)) {
			t.Error("a spec was written for an unknown version")
		}
		out = e.MustFail("up", "--version", "3.6", "--binary-store", e.Store)
		if !strings.Contains(out, "3.6") {
			t.Errorf("malformed version: %s", out)
		}
	})

	t.Run("port in use", func(t *testing.T) {
		t.Parallel()
		e := harness.New(t)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		port := l.Addr().(*net.TCPAddr).Port
		e.WriteSpec(1, v, func(s *spec.Cluster) {
			s.Members[0].PeerURL = "https://127.0.0.1:" + strconv.Itoa(port)
		})
		out := e.MustFail("up")
		if !strings.Contains(out, "127.0.0.1:"+strconv.Itoa(port)+" is already in use") {
			t.Errorf("port in use: %s", out)
		}
		if exists(filepath.Join(e.Dir, "members")) {
			t.Error("a data dir was created although the port was busy")
		}
	})

	t.Run("even member count warns", func(t *testing.T) {
		t.Parallel()
		e := harness.New(t)
		_, stderr, err := e.Run("up", "--members", "2", "--binary-store", e.Store)
		if err != nil {
			t.Fatalf("up with 2 members: %v\n%s", err, stderr)
		}
		if !strings.Contains(stderr, "warning: 2 members") {
			t.Errorf("no even-count warning:\n%s", stderr)
		}
	})

	t.Run("membership", func(t *testing.T) {
		t.Parallel()
		e := harness.New(t)
		e.Up(3, v)
		names := e.Spec().MemberNames()
		if out := e.MustFail("member", "remove", "etcd-9"); !strings.Contains(out, `no member named "etcd-9"`) || !strings.Contains(out, names[0]) {
			t.Errorf("remove of unknown member: %s", out)
		}
		if out := e.MustFail("member", "add", names[0]); !strings.Contains(out, "already exists") {
			t.Errorf("add of existing name: %s", out)
		}
		if out := e.MustFail("member", "add", "Bad_Name"); !strings.Contains(out, "Bad_Name") {
			t.Errorf("add with invalid name: %s", out)
		}
		// With one member down, removing another would leave 1 healthy of 2.
		e.MustRun("member", "stop", names[0])
		e.WaitStatus(30*time.Second, "member down", func(st *status.Status) bool { m, _ := st.Member(names[0]); return !m.Healthy })
		out := e.MustFail("member", "remove", names[1])
		if !strings.Contains(out, "refusing to remove "+names[1]) || !strings.Contains(out, "quorum") {
			t.Errorf("remove that loses quorum: %s", out)
		}
		if out := e.MustFail("member", "add", "etcd-4"); !strings.Contains(out, "unhealthy") {
			t.Errorf("add while a member is down: %s", out)
		}
		if got := len(e.Spec().Members); got != 3 {
			t.Errorf("spec has %d members after refused changes, want 3", got)
		}
		e.MustRun("member", "start", names[0])
		e.WaitStatus(60*time.Second, "healthy", harness.Healthy)
		if out := e.MustFail("status", "-o", "xml"); !strings.Contains(out, `unknown output format "xml"`) {
			t.Errorf("bad -o: %s", out)
		}
	})

	t.Run("last member", func(t *testing.T) {
		t.Parallel()
		e := harness.New(t)
		e.Up(1, v)
		name := e.Spec().Members[0].Name
		if out := e.MustFail("member", "remove", name, "--force"); !strings.Contains(out, "last member") {
			t.Errorf("remove last member: %s", out)
		}
		if !harness.Healthy(e.Status()) {
			t.Error("cluster unhealthy after refused removal")
		}
	})

	t.Run("recover after down", func(t *testing.T) {
		// After `steward down` (or a reboot) nothing runs: recover starts
		// this machine's agent, as up does, and finds the restarted
		// members quorate instead of failing on an unreachable agent.
		t.Parallel()
		e := harness.New(t)
		e.Up(1, v)
		e.MustRun("down")
		so, se, err := e.Run("recover")
		if err != nil || !strings.Contains(se, "started agent") || !strings.Contains(so, "none") {
			t.Fatalf("recover after down: %v\nstdout: %s\nstderr: %s", err, so, se)
		}
		e.WaitStatus(time.Minute, "the member back", harness.Healthy)
	})

	t.Run("agent not answering", func(t *testing.T) {
		t.Parallel()
		e := harness.New(t)
		e.Up(3, v)
		names := e.Spec().MemberNames()
		pids := map[string]int{}
		for _, n := range names {
			pids[n] = e.MemberPID(n)
		}
		b, err := os.ReadFile(filepath.Join(e.Dir, "run", "agent.pid"))
		if err != nil {
			t.Fatal(err)
		}
		agentPID, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if err := syscall.Kill(agentPID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		harness.Eventually(t, 10*time.Second, 100*time.Millisecond, "the agent gone after kill -9", func() error {
			if proc.Alive(agentPID) {
				return fmt.Errorf("agent %d still alive", agentPID)
			}
			return nil
		})
		// Members outlive their agent; status (which only reads) still
		// reports them and does not start an agent.
		st := e.Status()
		if !harness.Healthy(st) {
			t.Errorf("members unhealthy after agent death")
		}
		if m, _ := st.Member(names[0]); !strings.Contains(m.Process, "Unknown") {
			t.Errorf("process state with agent gone: %q", m.Process)
		}
		if st := e.Status(); st.Agents[0].Reachable {
			t.Fatalf("status started the agent: %+v", st.Agents)
		}
		// A command that works on member processes starts a new agent (as
		// up does), which adopts the running members instead of restarting
		// them.
		so, se, err := e.Run("member", "start", names[0])
		if err != nil || !strings.Contains(se, "started agent") {
			t.Fatalf("member start with the agent gone: want it to start the agent and succeed: %v: %s%s", err, so, se)
		}
		st = e.WaitStatus(30*time.Second, "adopted members", func(st *status.Status) bool {
			for _, m := range st.Members {
				if m.Process != "Running" && m.Process != "Starting" {
					return false
				}
			}
			return harness.Healthy(st)
		})
		for _, n := range names {
			if m, _ := st.Member(n); m.PID != pids[n] {
				t.Errorf("member %s pid %d after agent restart, want adopted pid %d", n, m.PID, pids[n])
			}
		}
	})
}
