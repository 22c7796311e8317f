package agent

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/kubeletrt"
)

// TestKubeletAPI: an agent given a kubelet config runs the kubelet (a
// shell script standing in for one), reports the capability and what
// runs (GET /v1/kubelet), switches the version over the API (PUT
// /v1/kubelet/version), refuses a version whose binary is missing with
// 400 naming the file, and an agent without a kubelet config says so
// (404) and reports no capability.
func TestKubeletAPI(t *testing.T) {
	root := t.TempDir()
	cache := filepath.Join(root, "kube")
	for _, v := range []string{"v1.35.4", "v1.36.3"} {
		bin := filepath.Join(cache, v, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, "kubelet"), []byte("#!/bin/sh\ntrap 'exit 0' TERM\nwhile :; do sleep 0.05; done\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg, _ := json.Marshal(kubeletrt.Config{Version: "v1.35.4", KubeCache: cache, Args: []string{"--config=/x"}})
	cfgPath := filepath.Join(root, "kubelet.json")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	a := New(Options{Dir: filepath.Join(root, "steward"), KubeletConfig: cfgPath, Log: slog.New(slog.DiscardHandler)})
	if err := os.MkdirAll(a.runDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); a.kubelet.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	_, c := unixServer(t, a)
	info, err := c.Info(t.Context())
	if err != nil || !slices.Contains(info.Capabilities, agentapi.CapKubelet) {
		t.Fatalf("info %+v, %v", info, err)
	}
	var st kubeletrt.Status
	deadline := time.Now().Add(10 * time.Second)
	for st.State != kubeletrt.StateRunning {
		if st, err = c.Kubelet(t.Context()); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubelet %+v: not running", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.Version != "v1.35.4" || strings.Join(st.Available, ",") != "v1.35.4,v1.36.3" {
		t.Errorf("status %+v", st)
	}
	st2, err := c.SwitchKubelet(t.Context(), "v1.36.3")
	if err != nil || st2.Version != "v1.36.3" || st2.State != kubeletrt.StateRunning || st2.PID == st.PID {
		t.Fatalf("switch: %+v, %v", st2, err)
	}
	_, err = c.SwitchKubelet(t.Context(), "v1.37.0")
	if ae, ok := errors.AsType[*agentapi.APIError](err); !ok || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Message, filepath.Join(cache, "v1.37.0", "bin", "kubelet")) {
		t.Errorf("switch to a missing binary: %v: want 400 naming the binary", err)
	}
	if now, _ := c.Kubelet(t.Context()); now.PID != st2.PID || now.Version != "v1.36.3" {
		t.Errorf("a refused switch changed what runs: %+v", now)
	}

	plain := New(Options{Dir: filepath.Join(root, "plain"), Log: slog.New(slog.DiscardHandler)})
	_, pc := unixServer(t, plain)
	if info, err := pc.Info(t.Context()); err != nil || slices.Contains(info.Capabilities, agentapi.CapKubelet) {
		t.Errorf("agent without a kubelet config: %+v, %v", info, err)
	}
	_, err = pc.Kubelet(t.Context())
	if ae, ok := errors.AsType[*agentapi.APIError](err); !ok || ae.Status != http.StatusNotFound || !strings.Contains(ae.Message, "does not run its host's kubelet") {
		t.Errorf("kubelet of an agent without one: %v", err)
	}
}
