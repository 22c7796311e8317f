package kubeletrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeKubelet is a shell script standing in for a kubelet binary (the
// runner's own start, stop and switch logic, not Kubernetes behaviour):
// it appends "VERSION PID ARGS" to $dir/starts, and on SIGTERM appends
// "VERSION PID term" to $dir/stops and exits.
func fakeKubelet(t *testing.T, cache, version, record string) {
	t.Helper()
	bin := filepath.Join(cache, version, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`#!/bin/sh
echo "%[1]s $$ $*" >> %[2]q/starts
trap 'echo "%[1]s $$ term" >> %[2]q/stops; exit 0' TERM
while :; do sleep 0.05; done
`, version, record)
	if err := os.WriteFile(filepath.Join(bin, "kubelet"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

type rig struct {
	dir, cache, config string
	r                  *Runner
	cancel             context.CancelFunc
	done               chan struct{}
}

func newRig(t *testing.T, versions ...string) *rig {
	t.Helper()
	dir := t.TempDir()
	g := &rig{dir: dir, cache: filepath.Join(dir, "kube"), config: filepath.Join(dir, "kubelet.json")}
	for _, v := range versions {
		fakeKubelet(t, g.cache, v, dir)
	}
	g.r = &Runner{ConfigPath: g.config, StateFile: filepath.Join(dir, "state.json"), PIDFile: filepath.Join(dir, "kubelet.pid"),
		DefaultLog: filepath.Join(dir, "logs", "kubelet.log"), ConfigPoll: 20 * time.Millisecond, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	return g
}

func (g *rig) writeConfig(t *testing.T, version string) {
	t.Helper()
	b, _ := json.Marshal(Config{Version: version, KubeCache: g.cache, Args: []string{"--config=/x", "--node-ip=10.0.0.1"}, StopTimeoutSeconds: 5})
	if err := os.WriteFile(g.config, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (g *rig) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	g.cancel, g.done = cancel, make(chan struct{})
	go func() { defer close(g.done); g.r.Run(ctx) }()
	t.Cleanup(g.stop)
}

func (g *rig) stop() {
	if g.cancel != nil {
		g.cancel()
		<-g.done
		g.cancel = nil
	}
}

func (g *rig) lines(name string) []string {
	b, _ := os.ReadFile(filepath.Join(g.dir, name))
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func waitFor(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (g *rig) running(t *testing.T, version string) Status {
	t.Helper()
	var st Status
	waitFor(t, "kubelet "+version+" running", func() error {
		st, _ = g.r.Kubelet(t.Context())
		if st.State != StateRunning || st.Version != version || st.PID == 0 {
			return fmt.Errorf("%+v", st)
		}
		if syscall.Kill(st.PID, 0) != nil {
			return fmt.Errorf("pid %d not alive", st.PID)
		}
		return nil
	})
	return st
}

func TestRunnerWaitsForConfigThenStarts(t *testing.T) {
	g := newRig(t, "v1.35.4", "v1.36.3")
	g.run(t)
	st, _ := g.r.Kubelet(t.Context())
	if st.State != StateWaiting {
		t.Fatalf("before the config file: %+v, want %s", st, StateWaiting)
	}
	if _, err := g.r.SwitchKubelet(t.Context(), "v1.36.3"); !errors.Is(err, ErrNotReady) {
		t.Fatalf("switch before the config: %v, want ErrNotReady", err)
	}
	g.writeConfig(t, "v1.35.4")
	st = g.running(t, "v1.35.4")
	if got := strings.Join(st.Available, ","); got != "v1.35.4,v1.36.3" {
		t.Errorf("available %s", got)
	}
	if l := g.lines("starts"); len(l) != 1 || !strings.HasSuffix(l[0], "--config=/x --node-ip=10.0.0.1") {
		t.Errorf("starts %q: want one with the config's args", l)
	}
	b, err := os.ReadFile(g.r.PIDFile)
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(st.PID) {
		t.Errorf("pid file %q (%v), want %d", b, err, st.PID)
	}
}

func TestRunnerRestartsAnExitedKubelet(t *testing.T) {
	g := newRig(t, "v1.35.4")
	g.writeConfig(t, "v1.35.4")
	g.run(t)
	first := g.running(t, "v1.35.4")
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a second kubelet", func() error {
		st, _ := g.r.Kubelet(t.Context())
		if st.State != StateRunning || st.PID == first.PID || st.Starts != 2 {
			return fmt.Errorf("%+v", st)
		}
		if !strings.Contains(st.LastExit, "killed") {
			return fmt.Errorf("last exit %q", st.LastExit)
		}
		return nil
	})
}

func TestRunnerSwitches(t *testing.T) {
	g := newRig(t, "v1.35.4", "v1.36.3")
	g.writeConfig(t, "v1.35.4")
	g.run(t)
	old := g.running(t, "v1.35.4")
	st, err := g.r.SwitchKubelet(t.Context(), "v1.36.3")
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != "v1.36.3" || st.State != StateRunning || st.PID == old.PID {
		t.Fatalf("after the switch: %+v", st)
	}
	// The old one got SIGTERM and was gone before the new one started.
	if s := g.lines("stops"); len(s) != 1 || s[0] != fmt.Sprintf("v1.35.4 %d term", old.PID) {
		t.Errorf("stops %q: want the old kubelet's SIGTERM", s)
	}
	if syscall.Kill(old.PID, 0) == nil {
		t.Errorf("the old kubelet %d still runs", old.PID)
	}
	if l := g.lines("starts"); len(l) != 2 || !strings.HasPrefix(l[1], "v1.36.3 ") {
		t.Errorf("starts %q", l)
	}
	// A switch to what runs changes nothing.
	again, err := g.r.SwitchKubelet(t.Context(), "v1.36.3")
	if err != nil || again.PID != st.PID || again.Starts != st.Starts {
		t.Errorf("second switch: %+v, %v: want nothing restarted", again, err)
	}
	// The version switched to is kept across an agent restart.
	g.stop()
	if s := g.lines("stops"); len(s) != 2 {
		t.Errorf("the agent's stop did not SIGTERM the kubelet: %q", s)
	}
	g2 := &Runner{ConfigPath: g.config, StateFile: g.r.StateFile, PIDFile: g.r.PIDFile, DefaultLog: g.r.DefaultLog, ConfigPoll: 20 * time.Millisecond}
	g.r = g2
	g.run(t)
	g.running(t, "v1.36.3")
}

func TestRunnerRefusesMissingBinary(t *testing.T) {
	g := newRig(t, "v1.35.4")
	g.writeConfig(t, "v1.35.4")
	g.run(t)
	before := g.running(t, "v1.35.4")
	for _, v := range []string{"v1.36.3", "1.36", "../../x"} {
		_, err := g.r.SwitchKubelet(t.Context(), v)
		if err == nil {
			t.Fatalf("switch to %q: no error", v)
		}
		if v == "v1.36.3" && (!errors.Is(err, ErrNoBinary) || !strings.Contains(err.Error(), filepath.Join(g.cache, "v1.36.3", "bin", "kubelet"))) {
			t.Errorf("switch to a missing binary: %v: want ErrNoBinary naming the path", err)
		}
	}
	after, _ := g.r.Kubelet(t.Context())
	if after.PID != before.PID || after.Starts != 1 {
		t.Errorf("a refused switch changed what runs: %+v", after)
	}
	if _, err := os.Stat(g.r.StateFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused switch recorded a version: %v", err)
	}
}

func TestRunnerStopsStaleKubelet(t *testing.T) {
	g := newRig(t, "v1.35.4")
	g.writeConfig(t, "v1.35.4")
	// What a killed agent leaves: its kubelet running, its PID file.
	stale := exec.Command(filepath.Join(g.cache, "v1.35.4", "bin", "kubelet"), "--stale")
	if err := stale.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() { _ = stale.Wait(); close(reaped) }()
	t.Cleanup(func() { _ = stale.Process.Kill(); <-reaped })
	if err := os.WriteFile(g.r.PIDFile, []byte(strconv.Itoa(stale.Process.Pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g.run(t)
	st := g.running(t, "v1.35.4")
	if st.PID == stale.Process.Pid {
		t.Fatal("the runner reports the stale kubelet as its own")
	}
	select {
	case <-reaped:
	case <-time.After(10 * time.Second):
		t.Fatalf("the stale kubelet %d still runs beside the new one", stale.Process.Pid)
	}
	if s := g.lines("stops"); len(s) != 1 || !strings.Contains(s[0], strconv.Itoa(stale.Process.Pid)) {
		t.Errorf("stops %q: want the stale kubelet's SIGTERM", s)
	}
}

func TestParseConfig(t *testing.T) {
	ok := `{"version":"v1.35.4","kubeCache":"/c","args":["--config=/x"]}`
	if _, err := ParseConfig([]byte(ok)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ in, want string }{
		{`{"version":"1.35","kubeCache":"/c","args":["a"]}`, "version"},
		{`{"version":"v1.35.4","args":["a"]}`, "neither kubeCache nor binaries"},
		{`{"version":"v1.35.4","kubeCache":"c","args":["a"]}`, "not an absolute path"},
		{`{"version":"v1.35.4","kubeCache":"/c","args":[]}`, "args"},
		{`{"version":"v1.35.4","kubeCache":"/c","args":["a"],"bogus":1}`, "bogus"},
		{`{"version":"v1.35.4","binaries":{"x":"/b"},"args":["a"]}`, "binaries"},
		{`{"version":"v1.35.4","kubeCache":"/c","args":["a"],"stopTimeoutSeconds":-1}`, "negative"},
	} {
		_, err := ParseConfig([]byte(bad.in))
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want ErrConfig naming %q", bad.in, err, bad.want)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"version":"v1.35.4","kubeCache":"/c","args":["--config=/x"]}`))
	f.Add([]byte(`{"version":"v1.35.4","binaries":{"v1.35.4":"/b"},"prefix":["nsenter","--"],"args":["a"],"log":"/l"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		if CheckVersion(c.Version) != nil || len(c.Args) == 0 {
			t.Fatalf("accepted %q", b)
		}
		for _, v := range []string{c.Version} {
			if p := c.Binary(v); p != "" && !filepath.IsAbs(p) {
				t.Fatalf("binary %q of %q not absolute", p, b)
			}
		}
	})
}
