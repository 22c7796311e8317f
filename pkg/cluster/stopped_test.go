package cluster

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestStopped: a cluster whose agent socket answers nothing and whose
// members accept no connection is stopped, told within a second; one
// member listening, or an agent on another host, makes it not stopped.
// (Its status: pkg/status TestStopped.)
func TestStopped(t *testing.T) {
	dir := t.TempDir()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 3, Version: binaries.EmbeddedVersion(), StewardDir: dir, Host: "127.0.0.1",
		FreePort: spec.FreePort("127.0.0.1"), NoMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Dir: dir, Spec: s}
	start := time.Now()
	if !c.Stopped(t.Context()) {
		t.Fatal("no agent and no member listening: not reported stopped")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the stopped check took %s", d)
	}
	err = c.RequireRunning(t.Context(), "take a backup")
	if !errors.Is(err, ErrStopped) || !strings.HasPrefix(err.Error(), "cannot take a backup: cluster steward is stopped") || !strings.Contains(err.Error(), "none of its 3 members answers") {
		t.Errorf("RequireRunning: %v", err)
	}
	// One member listening: not stopped (its agent may be the one gone).
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.Members[1].ClientURL, "https://"))
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		t.Fatal(err)
	}
	if c.Stopped(t.Context()) {
		t.Error("a member listening on its client port, reported stopped")
	}
	l.Close()

	// Agents on other hosts: never "stopped" from here.
	s.Agents = append(s.Agents, spec.Agent{Name: "cp-2", Host: "10.0.0.12", Address: "https://10.0.0.12:" + strconv.Itoa(2378)})
	if c.Stopped(t.Context()) {
		t.Error("a multi-host cluster reported stopped")
	}
}
