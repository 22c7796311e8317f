// Package kubeletrt is the seam between operations and what runs a host's
// kubelet, as pkg/memberrt is for etcd members.
//
// A Runtime is one host's kubelet: what runs (version, state) and a
// version switch. Today one implementation: the host's Steward agent,
// started with `--kubelet-config FILE`, runs the kubelet as its child
// with a Runner (runner.go) and serves it over its API (GET /v1/kubelet,
// PUT /v1/kubelet/version; the agent's client, package agentapi,
// implements Runtime). A systemd unit driven the way adopt drives etcd's
// would be a second implementation; localkube's nodes have no systemd, so
// it is not written.
//
// Restarting a kubelet keeps the pods: the containers are containerd's
// (their shims are not the kubelet's children), and a kubelet that starts
// finds them and takes them over. Kubernetes' own rule still applies to
// the version moved across: "Before performing a minor version kubelet
// upgrade, drain pods from that node. In-place minor version kubelet
// upgrades are not supported" (the version skew policy,
// kubernetes.io/releases/version-skew-policy/, "Supported component
// upgrade order", kubelet): the caller (pkg/kubeupgrade) drains first
// across a minor, and keeps the pods for a patch.
package kubeletrt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"
)

// Runtime is one host's kubelet.
type Runtime interface {
	// Kubelet is what runs.
	Kubelet(ctx context.Context) (Status, error)
	// SwitchKubelet stops the kubelet (SIGTERM, waited for) and starts
	// version's binary; nothing when version already runs. It returns
	// once the new process runs.
	SwitchKubelet(ctx context.Context, version string) (Status, error)
}

// States of a kubelet.
const (
	// StateWaiting: the runner's config file is not there yet (the host is
	// still being provisioned: localkube writes it once containerd runs).
	StateWaiting = "waiting-for-config"
	// StateRunning: the process runs.
	StateRunning = "running"
	// StateRestarting: it exited and is started again after a pause.
	StateRestarting = "restarting"
	// StateStopped: the runner stopped it (the agent is stopping).
	StateStopped = "stopped"
	// StateFailed: it could not be started (LastError says why); tried
	// again after a pause.
	StateFailed = "failed"
)

// Status is what a host's kubelet runner reports (GET /v1/kubelet).
type Status struct {
	// Version runs (or is started next, while restarting or failed).
	Version string `json:"version"`
	State   string `json:"state"`
	PID     int    `json:"pid,omitempty"`
	// Binary is Version's kubelet binary.
	Binary string `json:"binary,omitempty"`
	// Starts counts the processes started since the agent started.
	Starts    int       `json:"starts"`
	StartedAt time.Time `json:"startedAt,omitzero"`
	// LastExit is how the previous process ended; LastError the last
	// failure to start one.
	LastExit  string `json:"lastExit,omitempty"`
	LastError string `json:"lastError,omitempty"`
	// Available are the versions whose kubelet binary is on the host
	// (Config.Binaries and Config.KubeCache), oldest first as found.
	Available []string `json:"available"`
	// Config is the runner's config file.
	Config string `json:"config"`
}

// Config is the file an agent is given with --kubelet-config (JSON; a
// field it does not know is refused).
type Config struct {
	// Version is the kubelet version run when none was switched to yet.
	Version string `json:"version"`
	// KubeCache holds each version's binary at KUBECACHE/VERSION/bin/
	// kubelet (hack/build-kube.sh's layout, `make kube-binaries`).
	KubeCache string `json:"kubeCache,omitempty"`
	// Binaries name a version's binary directly (before KubeCache).
	Binaries map[string]string `json:"binaries,omitempty"`
	// Prefix runs before the binary (how to enter the host's namespaces:
	// localkube's nodes give `nsenter --mount=/proc/HOLDER/ns/mnt --`).
	Prefix []string `json:"prefix,omitempty"`
	// Args are the kubelet's arguments, the same for every version.
	Args []string `json:"args"`
	// Log is the file the kubelet's output is appended to (default
	// DIR/logs/kubelet.log of the agent's directory).
	Log string `json:"log,omitempty"`
	// StopTimeoutSeconds bounds the wait after SIGTERM before SIGKILL
	// (default 30).
	StopTimeoutSeconds int `json:"stopTimeoutSeconds,omitempty"`
}

// ErrConfig: the kubelet config file is not valid.
var ErrConfig = errors.New("invalid kubelet config")

// ErrNoBinary: a version's kubelet binary is not on the host.
var ErrNoBinary = errors.New("kubelet binary missing")

var versionRE = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`)

// ParseConfig reads a kubelet config; every error names the field.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if err := CheckVersion(c.Version); err != nil {
		return Config{}, fmt.Errorf("%w: version: %v", ErrConfig, err)
	}
	if c.KubeCache == "" && len(c.Binaries) == 0 {
		return Config{}, fmt.Errorf("%w: neither kubeCache nor binaries names where the kubelet binaries are", ErrConfig)
	}
	if c.KubeCache != "" && !filepath.IsAbs(c.KubeCache) {
		return Config{}, fmt.Errorf("%w: kubeCache %q is not an absolute path", ErrConfig, c.KubeCache)
	}
	for v, p := range c.Binaries {
		if err := CheckVersion(v); err != nil {
			return Config{}, fmt.Errorf("%w: binaries: %v", ErrConfig, err)
		}
		if !filepath.IsAbs(p) {
			return Config{}, fmt.Errorf("%w: binaries: %s: %q is not an absolute path", ErrConfig, v, p)
		}
	}
	if len(c.Args) == 0 {
		return Config{}, fmt.Errorf("%w: args: empty (a kubelet needs at least --config or --kubeconfig)", ErrConfig)
	}
	if c.Log != "" && !filepath.IsAbs(c.Log) {
		return Config{}, fmt.Errorf("%w: log %q is not an absolute path", ErrConfig, c.Log)
	}
	if c.StopTimeoutSeconds < 0 {
		return Config{}, fmt.Errorf("%w: stopTimeoutSeconds %d is negative", ErrConfig, c.StopTimeoutSeconds)
	}
	return c, nil
}

// CheckVersion refuses what is not a release version (vX.Y.Z): a version
// becomes a path.
func CheckVersion(v string) error {
	if !versionRE.MatchString(v) {
		return fmt.Errorf("%q is not a Kubernetes release version (vX.Y.Z)", v)
	}
	return nil
}

// Binary is version's kubelet binary (it may not exist).
func (c Config) Binary(version string) string {
	if p, ok := c.Binaries[version]; ok {
		return p
	}
	if c.KubeCache == "" {
		return ""
	}
	return filepath.Join(c.KubeCache, version, "bin", "kubelet")
}

// HasBinary is nil when version's binary is a regular file, else
// ErrNoBinary naming it.
func (c Config) HasBinary(version string) error {
	p := c.Binary(version)
	if p == "" {
		return fmt.Errorf("%w: no binary of kubelet %s is named (neither binaries nor kubeCache)", ErrNoBinary, version)
	}
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: kubelet %s: %s is not there", ErrNoBinary, version, p)
	}
	return nil
}

// Available are the versions whose binary is there.
func (c Config) Available() []string {
	var out []string
	for v := range c.Binaries {
		if c.HasBinary(v) == nil {
			out = append(out, v)
		}
	}
	if c.KubeCache != "" {
		ents, _ := os.ReadDir(c.KubeCache)
		for _, e := range ents {
			v := e.Name()
			if CheckVersion(v) == nil && !slices.Contains(out, v) && c.HasBinary(v) == nil {
				out = append(out, v)
			}
		}
	}
	slices.Sort(out)
	if out == nil {
		out = []string{}
	}
	return out
}

func (c Config) stopTimeout() time.Duration {
	if c.StopTimeoutSeconds > 0 {
		return time.Duration(c.StopTimeoutSeconds) * time.Second
	}
	return 30 * time.Second
}
