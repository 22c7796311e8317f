package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/internal/proc"
)

type upOptions struct {
	dir, version, kubeCache, images, steward, versitygw, store string
	nodes                                                      int
	supervise                                                  bool
}

func newUpCommand() *cobra.Command {
	var o upOptions
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Bring a local Kubernetes of 1 or 3 nodes up and leave it running",
		Long: `Bring up a local Kubernetes: each node a network namespace on a bridge with
its own containerd, kubelet and kube-proxy, the control plane as kubeadm's
static pods, etcd a Steward cluster beneath, a default StorageClass, an
S3 server and the cluster DNS, kubeadm's CoreDNS at 10.96.0.10
(docs/kubernetes-local.md). It returns once every node is Ready and the
cluster DNS answers,
leaving a supervisor process that holds the cluster until localkube down,
and prints the lines to export: KUBECONFIG, STEWARD_DIR, S3_ENDPOINT,
S3_BUCKET, S3_CREDENTIALS_FILE.`,
		Example: `  localkube up --dir .cache/localkube --nodes 3 --version v1.36.3
  eval "$(localkube up --dir .cache/localkube | grep ^export)"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "", "the cluster's directory (default SOURCE/.cache/localkube)")
	f.IntVar(&o.nodes, "nodes", 1, "number of nodes: 1 or 3")
	f.StringVar(&o.version, "version", "v1.36.3", "Kubernetes version (its binaries built by make kube-binaries, its images by make images)")
	f.StringVar(&o.kubeCache, "kube-cache", "", "per-version Kubernetes binaries, <dir>/<version>/bin (default SOURCE/.cache/kube)")
	f.StringVar(&o.images, "images", "", "directory of the image tarballs (default SOURCE/.cache/images)")
	f.StringVar(&o.steward, "steward", "", "steward binary (default SOURCE/bin/steward)")
	f.StringVar(&o.versitygw, "versitygw", "", "versitygw binary, the S3 server (default SOURCE/.cache/bin/versitygw)")
	f.StringVar(&o.store, "binary-store", "", "etcd binary store for the Steward cluster (default: none, the etcd version linked into steward)")
	f.BoolVar(&o.supervise, "supervise", false, "run the cluster in this process until SIGTERM (what up leaves running)")
	_ = f.MarkHidden("supervise")
	return cmd
}

// sourceDir is the module root of the current directory.
func sourceDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
		return "", errors.New("not inside Steward's source tree: give --dir, --kube-cache, --images, --steward and --versitygw")
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

func (o *upOptions) config(ctx context.Context) (localkube.Config, error) {
	if o.dir == "" || o.kubeCache == "" || o.images == "" || o.steward == "" || o.versitygw == "" {
		src, err := sourceDir(ctx)
		if err != nil {
			return localkube.Config{}, err
		}
		def := func(p *string, rel string) {
			if *p == "" {
				*p = filepath.Join(src, rel)
			}
		}
		def(&o.dir, ".cache/localkube")
		def(&o.kubeCache, ".cache/kube")
		def(&o.images, ".cache/images")
		def(&o.steward, "bin/steward")
		def(&o.versitygw, ".cache/bin/versitygw")
	}
	if o.nodes != 1 && o.nodes != 3 {
		return localkube.Config{}, fmt.Errorf("--nodes %d: a local cluster has 1 or 3 nodes", o.nodes)
	}
	// The nodes run their binaries from inside their own namespaces and
	// directories, so a relative path would name nothing there (a kubelet
	// that never starts, found only in its log after the 3-minute wait).
	for _, p := range []*string{&o.kubeCache, &o.images, &o.steward, &o.versitygw, &o.store} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return localkube.Config{}, err
		}
		*p = abs
	}
	cfg, err := localkube.FromCache(o.kubeCache, o.images, o.version)
	if err != nil {
		return cfg, advise(err)
	}
	abs, err := filepath.Abs(o.dir)
	if err != nil {
		return cfg, err
	}
	cfg.Dir, cfg.Nodes, cfg.Steward, cfg.VersityGW, cfg.BinaryStore = abs, o.nodes, o.steward, o.versitygw, o.store
	return cfg, advise(cfg.Check())
}

// advise adds what to run to the errors of a missing part.
func advise(err error) error {
	if err == nil {
		return nil
	}
	var mb *localkube.MissingBinaryError
	var mi *localkube.MissingImageError
	var mp *localkube.MissingPackagesError
	switch {
	case errors.As(err, &mb):
		return fmt.Errorf("%w: build it with `make kube-binaries KUBE_VERSIONS=%s`", err, mb.Version)
	case errors.As(err, &mi):
		return fmt.Errorf("%w: build the images with `make images` (after `make kube-binaries KUBE_VERSIONS=%s`)", err, mi.Version)
	case errors.As(err, &mp):
		return fmt.Errorf("%w: install them with `%s` (or `make kube-node`)", err, localkube.AptLine)
	}
	if strings.Contains(err.Error(), "steward binary") {
		return fmt.Errorf("%w: build it with `make build`", err)
	}
	if strings.Contains(err.Error(), "versitygw binary") {
		return fmt.Errorf("%w: build it with `make s3-server`", err)
	}
	return err
}

func (o *upOptions) run(cmd *cobra.Command) error {
	ctx := cmd.Context()
	if os.Geteuid() != 0 {
		return errors.New("a local Kubernetes needs root (network namespaces, mounts, cgroups): run it as root")
	}
	cfg, err := o.config(ctx)
	if err != nil {
		return err
	}
	if o.supervise {
		return supervise(cfg)
	}
	if s, err := localkube.ReadState(cfg.Dir); err == nil && proc.Alive(s.Owner) {
		return fmt.Errorf("a cluster already runs in %s (supervisor PID %d): `localkube down --dir %s` first (make kube-down)", cfg.Dir, s.Owner, cfg.Dir)
	}
	// The supervisor: this command again, in a session of its own, so it
	// outlives this process and the terminal.
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return err
	}
	logPath := filepath.Join(cfg.Dir, "localkube.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"up", "--supervise", "--dir", cfg.Dir, "--nodes", fmt.Sprint(o.nodes), "--version", cfg.Version,
		"--kube-cache", o.kubeCache, "--images", o.images, "--steward", o.steward, "--versitygw", o.versitygw}
	if o.store != "" {
		args = append(args, "--binary-store", o.store)
	}
	sup := exec.Command(self, args...)
	sup.Stdout, sup.Stderr = logf, logf
	sup.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := sup.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- sup.Wait() }()
	fmt.Fprintf(cmd.ErrOrStderr(), "localkube: bringing up %d node(s) of Kubernetes %s in %s (supervisor PID %d, log %s)\n", o.nodes, cfg.Version, cfg.Dir, sup.Process.Pid, logPath)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("the cluster did not come up (%v); its log %s ends:\n%s", err, logPath, tail(logPath, 20))
		case <-ctx.Done():
			_ = sup.Process.Signal(syscall.SIGTERM)
			<-exited
			return ctx.Err()
		case <-tick.C:
		}
		s, err := localkube.ReadState(cfg.Dir)
		if err != nil || !s.Ready || s.Owner != sup.Process.Pid {
			continue
		}
		total := ""
		for _, t := range s.Timings {
			if t.Step == "total" {
				total = fmt.Sprintf(" in %.1fs", t.Seconds)
			}
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "localkube: %d node(s) Ready%s; `localkube down --dir %s` (make kube-down) removes it\n", len(s.Nodes), total, cfg.Dir)
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "export KUBECONFIG=%s\n", s.Kubeconfig)
		fmt.Fprintf(out, "export STEWARD_DIR=%s\n", s.StewardDir)
		fmt.Fprintf(out, "export S3_ENDPOINT=%s\n", s.S3Endpoint)
		fmt.Fprintf(out, "export S3_BUCKET=%s\n", s.S3Bucket)
		fmt.Fprintf(out, "export S3_CREDENTIALS_FILE=%s\n", s.S3CredentialsFile)
		return nil
	}
}

// supervise brings the cluster up in this process and holds it until
// SIGTERM or SIGINT, then removes it (its directory kept: `localkube
// down` removes that).
func supervise(cfg localkube.Config) error {
	sigCtx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	cfg.Log = os.Stderr
	return holdCluster(sigCtx, func(ctx context.Context) (downer, error) {
		c, err := localkube.Up(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return c, nil
	})
}

type downer interface{ Down() error }

// holdCluster brings a cluster up with up, bounded by 10 minutes and by
// sigCtx (ended on a signal: up removes what it made), then holds it until
// sigCtx ends and removes it. A signal that came once up no longer
// looked at its context is not lost: sigCtx stays done.
func holdCluster(sigCtx context.Context, up func(context.Context) (downer, error)) error {
	ctx, cancel := context.WithTimeout(sigCtx, 10*time.Minute)
	defer cancel()
	c, err := up(ctx)
	if err != nil {
		return err
	}
	<-sigCtx.Done()
	fmt.Fprintf(os.Stderr, "localkube: %v: removing the cluster\n", context.Cause(sigCtx))
	return c.Down()
}

// tail is the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
