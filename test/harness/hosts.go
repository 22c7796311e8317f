package harness

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/agent"
)

// Hosts is a multi-host cluster's test bed: a coordinator (an Env in the
// root namespace, where `steward init`, `up` and every command run) and one
// network namespace per host (a Network), each with a Steward agent of its
// own directory once Host.StartAgent ran.
type Hosts struct {
	*Env
	Net   *Network
	Hosts []*AgentHost
}

// AgentHost is one host of Hosts: its namespace and its agent's directory.
type AgentHost struct {
	*Host
	// Dir is the host's Steward directory (the agent's --dir).
	Dir string
	e   *Env
	// OwnStore, set before StartAgent, runs the agent without
	// --binary-store: on its own store (DIR/binaries, empty until a version
	// is pushed to it) instead of the test store. Push every version its
	// members run before `up`: a member of the embedded version would
	// otherwise run the race-built steward binary (see Store).
	OwnStore bool
	// Env, set before StartAgent, is added to the agent's environment (a
	// crash point of the agent, say: crashpoint.EnvVar).
	Env []string
	// tb is the test that made the host: the agent lives as long as it
	// does, even when a subtest starts it.
	tb    testing.TB
	agent *Process // guarded by the test goroutine: StartAgent and StopAgent
}

// NewHosts returns a coordinator and n hosts h1..hn on a fresh network.
// Cleanup stops each host's agent and members (`steward down` on its
// directory), fails the test on anything left running or on a data race in
// the host's logs, then removes the network.
func NewHosts(tb testing.TB, n int) *Hosts {
	tb.Helper()
	e := New(tb)
	hs := &Hosts{Env: e, Net: NewNetwork(tb)}
	for i := 1; i <= n; i++ {
		h := hs.Net.AddHost(tb, "h"+strconv.Itoa(i))
		dir, err := os.MkdirTemp("", "stw-"+h.Name+"-")
		if err != nil {
			tb.Fatal(err)
		}
		ah := &AgentHost{Host: h, Dir: dir, e: e, tb: tb}
		tb.Cleanup(ah.cleanup)
		hs.Hosts = append(hs.Hosts, ah)
	}
	return hs
}

// HostFlags are the --host NAME=ADDRESS flags of every host, for init.
func (hs *Hosts) HostFlags() []string {
	var out []string
	for _, h := range hs.Hosts {
		out = append(out, "--host", h.Name+"="+h.Addr)
	}
	return out
}

// Host returns the host of that name.
func (hs *Hosts) Host(name string) *AgentHost {
	for _, h := range hs.Hosts {
		if h.Name == name {
			return h
		}
	}
	hs.TB.Fatalf("no host %s", name)
	return nil
}

// Init runs `steward init` on the coordinator for every host, with the
// test store and version v, plus extra flags.
func (hs *Hosts) Init(v string, extra ...string) string {
	hs.TB.Helper()
	args := append([]string{"init", "--version", v, "--binary-store", hs.Store}, hs.HostFlags()...)
	return hs.MustRun(append(args, extra...)...)
}

// JoinFile is where the coordinator wrote a host's join file.
func (hs *Hosts) JoinFile(host string) string {
	return filepath.Join(hs.Dir, "join", host+".yaml")
}

// StartAgents copies each host's join file to it and starts its agent.
func (hs *Hosts) StartAgents() {
	hs.TB.Helper()
	for _, h := range hs.Hosts {
		h.StartAgent(hs.TB, hs.JoinFile(h.Name))
	}
}

// StartAgent copies the join file into the host's directory (as an operator
// copies it to the host) and starts `steward agent --join` in the host's
// namespace (with the test store unless OwnStore is set), logging to
// DIR/logs/agent-NAME.log; it returns once the agent's socket answers. The
// agent runs until the test that made the host ends (or KillAgent),
// whichever test tb is. With joinFile empty the agent starts from the
// identity an earlier join left. An agent started before must be gone
// (KillAgent, or a crash point it reached): it is waited for, briefly,
// so that the new one never finds its lock still held.
func (h *AgentHost) StartAgent(tb testing.TB, joinFile string) {
	tb.Helper()
	if h.agent != nil {
		select {
		case <-h.agent.Exited():
		case <-time.After(10 * time.Second):
			tb.Fatalf("host %s: the agent started before still runs after 10 s: KillAgent it first", h.Name)
		}
	}
	args := []string{"agent", "--dir", h.Dir}
	if !h.OwnStore {
		args = append(args, "--binary-store", h.e.Store)
	}
	if joinFile != "" {
		b, err := os.ReadFile(joinFile)
		if err != nil {
			tb.Fatal(err)
		}
		local := filepath.Join(h.Dir, "join.yaml")
		if err := os.WriteFile(local, b, 0o600); err != nil {
			tb.Fatal(err)
		}
		args = append(args, "--join", local)
	}
	if err := os.MkdirAll(filepath.Join(h.Dir, "logs"), 0o700); err != nil {
		tb.Fatal(err)
	}
	logf, err := os.OpenFile(filepath.Join(h.Dir, "logs", "agent-"+h.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	defer logf.Close()
	cmd := h.Command(context.Background(), h.e.Bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(h.Env) > 0 {
		cmd.Env = append(os.Environ(), h.Env...)
	}
	h.agent = h.Start(h.tb, cmd)
	sock := agent.SocketPathFor(h.Dir, h.Name)
	Eventually(tb, 20*time.Second, 100*time.Millisecond, "agent of host "+h.Name+" serves", func() error {
		select {
		case <-h.agent.Exited():
			b, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("agent exited: %v: %s", h.agent.Wait(), b)
		default:
		}
		// Dialled, not just found: a killed agent leaves its socket file
		// behind, which refuses connections until the new agent listens
		// (after its mutual-TLS listener: pkg/agent).
		c, err := net.DialTimeout("unix", sock, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// RunAgent runs `steward agent ARGS` in the host's namespace to its end and
// returns its output: for refusals, which exit before serving.
func (h *AgentHost) RunAgent(tb testing.TB, args ...string) (string, error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := h.Command(ctx, h.e.Bin, append([]string{"agent", "--dir", h.Dir}, args...)...).CombinedOutput()
	return string(out), err
}

// RunIn runs a program in the host's namespace to its end (at most
// timeout) and returns its combined output: a client on that host.
func (h *AgentHost) RunIn(tb testing.TB, timeout time.Duration, name string, args ...string) (string, error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := h.Command(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// KillAgent kills the host's agent with SIGKILL; its members keep running.
func (h *AgentHost) KillAgent() {
	if h.agent != nil {
		h.agent.Kill()
	}
}

func (h *AgentHost) cleanup() {
	tb := h.e.TB
	if _, err := os.Stat(h.Dir); err != nil {
		return
	}
	so, se, err := h.e.runIn(h.Dir, "down")
	if err != nil && !strings.Contains(se, "nothing to stop") {
		tb.Errorf("cleanup of host %s: steward down: %v%s: %s%s", h.Name, err, raceExit(err, se), so, se)
	}
	if left := ProcessesUsing(h.Dir); len(left) > 0 {
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		tb.Errorf("cleanup of host %s: processes left running after steward down: %v", h.Name, left)
	}
	h.e.checkLogRacesIn(h.Dir)
	if !tb.Failed() || os.Getenv("STEWARD_KEEP_FAILED") == "" {
		_ = os.RemoveAll(h.Dir)
	} else {
		tb.Logf("keeping %s", h.Dir)
	}
}

// DelayPeers delays every peer link between two hosts by d each way: for
// each member of the spec (Init first) and each other host, that host's
// connections to the member's peer URL go through a DelayProxy
// (Host.DelayLink). A round trip between two members on different hosts
// then takes 2d more; members on one host, clients and agents are not
// delayed. It returns the links, whose proxies count what went through.
func (hs *Hosts) DelayPeers(tb testing.TB, d time.Duration) []*DelayedLink {
	tb.Helper()
	var links []*DelayedLink
	for _, m := range hs.Spec().Members {
		u, err := url.Parse(m.PeerURL)
		if err != nil {
			tb.Fatalf("member %s: peer URL %q: %v", m.Name, m.PeerURL, err)
		}
		for _, h := range hs.Hosts {
			if h.Name != m.Agent {
				links = append(links, h.DelayLink(tb, u.Host, d))
			}
		}
	}
	return links
}
