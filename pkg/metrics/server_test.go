package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/spec"
)

// eventually polls cond every 100 ms until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRunFollowsTheSpec: the agent's metrics server starts at the
// metricsAddress of its spec (none before there is a spec), moves when the
// address changes, stops when it is removed, and a busy port is retried
// without stopping anything; Run returns when its context ends, closing
// the server. No etcd runs: the members are unreachable, which the series
// say.
func TestRunFollowsTheSpec(t *testing.T) {
	dir := t.TempDir()
	free := spec.FreePort("127.0.0.1")
	port := func() string {
		p, err := free()
		if err != nil {
			t.Fatal(err)
		}
		return "127.0.0.1:" + strconv.Itoa(p)
	}
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 1, Version: binaries.EmbeddedVersion(), StewardDir: dir, FreePort: free})
	if err != nil {
		t.Fatal(err)
	}
	save := func(addr string) {
		s.Agents[0].MetricsAddress = addr
		if err := s.Save(filepath.Join(dir, spec.FileName)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, dir, s.Agents[0].Name, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() { cancel(); <-done })

	serves := func(addr string) func() error {
		return func() error {
			body, err := httpGetBody(t.Context(), "http://"+addr+"/metrics")
			if err != nil {
				return err
			}
			want := fmt.Sprintf(`steward_member_up{agent=%q,cluster=%q,member="etcd-1"} 0`, s.Agents[0].Name, s.Name)
			if !strings.Contains(body, want) {
				return fmt.Errorf("no %s in\n%s", want, body)
			}
			return nil
		}
	}
	closed := func(addr string) func() error {
		return func() error {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				return fmt.Errorf("%s still accepts connections", addr)
			}
			return nil
		}
	}

	first := port()
	save(first)
	eventually(t, 15*time.Second, "metrics at "+first, serves(first))

	// A busy port: logged and retried, the old server is closed.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	save(busy.Addr().String())
	eventually(t, 10*time.Second, "the old address closed", closed(first))
	busy.Close()
	eventually(t, 15*time.Second, "metrics at the freed port", serves(busy.Addr().String()))

	save("")
	eventually(t, 10*time.Second, "no metrics once the address is removed", closed(busy.Addr().String()))

	last := port()
	save(last)
	eventually(t, 15*time.Second, "metrics at "+last, serves(last))
	cancel()
	<-done
	if err := closed(last)(); err != nil {
		t.Errorf("after Run returned: %v", err)
	}
}
