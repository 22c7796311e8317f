// Package agent is the `steward agent` command: the per-host agent in the
// foreground (`steward up` starts one in the background on a single host;
// systemd runs it on the hosts of a multi-host cluster), and `steward agent
// install`, which writes that systemd unit.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/internal/atomicfile"
	agentpkg "github.com/etcd-steward/steward/pkg/agent"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/backupd"
	"github.com/etcd-steward/steward/pkg/certs"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/join"
	"github.com/etcd-steward/steward/pkg/metrics"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/recovery"
)

// NewCommand returns the agent command.
func NewCommand(g *cli.Globals) *cobra.Command {
	var name, socket, joinFile, store, listenAddr, kubeManifests string
	var pod podFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the per-host agent that supervises this host's etcd members",
		Long: `Run the agent of this host in the foreground (it never daemonizes: run it under
systemd, see 'steward agent install').

On a single host, 'steward up' starts it. On a host of a multi-host cluster, the
first run takes the join file 'steward init' or 'steward host add' wrote for this
host (--join FILE): the agent keeps its identity in DIR/agent.yaml and its
certificates in DIR/pki, and serves its API on the host's address over mutual TLS.
Later runs need only --dir.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := g.StewardDir()
			if err != nil {
				return err
			}
			if err := pod.check(); err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			o := agentpkg.Options{Name: name, Dir: dir, Socket: socket, Log: log, BinaryStore: store, Advise: cli.LibraryAdvice}
			if kubeManifests != "" {
				if o.KubeManifests, err = filepath.Abs(kubeManifests); err != nil {
					return err
				}
			}
			if listenAddr != "" && net.ParseIP(listenAddr) == nil {
				return fmt.Errorf("--listen-address %q: not an IP address; give the pod's IP ($(POD_IP) from the downward API) or 0.0.0.0", listenAddr)
			}
			if joinFile != "" && !(listenAddr != "" && joinedAlready(dir, joinFile)) {
				f, err := join.Read(joinFile)
				if err != nil {
					return err
				}
				var addrs []net.IP
				if listenAddr == "" {
					// On a host the file's address must be this machine's;
					// a pod's is its DNS name, which resolves to the pod's
					// IP only once the peer Service publishes it.
					if addrs, err = join.LocalAddrs(); err != nil {
						return err
					}
				}
				id, err := join.Apply(dir, f, time.Now(), addrs)
				if err != nil {
					return joinHint(err, f)
				}
				log.Info("joined cluster", "cluster", id.Cluster, "agent", id.Agent, "host", id.Host,
					"note", "the join file holds this host's keys: delete "+joinFile)
			}
			id, err := join.LoadIdentity(dir)
			switch {
			case errors.Is(err, os.ErrNotExist):
			case err != nil:
				return err
			default:
				if cmd.Flags().Changed("name") && name != id.Agent {
					return fmt.Errorf("%s is the directory of agent %s (DIR/%s); --name %s names another", dir, id.Agent, join.IdentityFile, name)
				}
				o.Name = id.Agent
				o.Listen = id.Listen()
				if listenAddr != "" {
					// Pod mode: listen on the pod's IP, advertise the
					// identity's DNS name (members likewise).
					o.ListenHost = listenAddr
					o.Listen = net.JoinHostPort(listenAddr, strconv.Itoa(id.Port))
				}
				o.ClusterToken = id.ClusterToken
				o.CertDir = filepath.Join(dir, "pki")
				if o.TLS, err = pki.AgentServerTLS(filepath.Join(dir, "pki")); err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			// The continuous backup loop, automatic recovery and the
			// certificate renewal (pkg/certs.RunRenewal) run beside
			// the supervisor, from the cluster spec of this directory (on a
			// host of a multi-host cluster, the copy the coordinator hands
			// over; they wait quietly until there is one). The backup loop
			// and recovery act only while this agent runs the etcd leader,
			// or is the first agent; the renewal where the directory holds
			// the CA key, one renewal at a time per directory.
			bctx, bcancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				var wg sync.WaitGroup
				wg.Add(2)
				go func() {
					defer wg.Done()
					recovery.RunAuto(bctx, dir, o.Name, log.With("component", "recovery"))
				}()
				go func() {
					defer wg.Done()
					certs.RunRenewal(bctx, dir, log.With("component", "certificates"), cli.LibraryAdvice)
				}()
				backupd.Run(bctx, dir, o.Name, log.With("component", "backup"))
				wg.Wait()
			}()
			// Prometheus metrics at the agent's metricsAddress in the spec
			// (none without one), until the agent returns.
			mctx, mcancel := context.WithCancel(ctx)
			mdone := make(chan struct{})
			go func() {
				defer close(mdone)
				// A cluster.yaml the loops cannot read is logged once,
				// with its path, beside the metrics server.
				var wg sync.WaitGroup
				wg.Go(func() { (&cluster.SpecWatch{Dir: dir, Log: log.With("component", "spec")}).Run(mctx) })
				metrics.Run(mctx, dir, o.Name, log.With("component", "metrics"))
				wg.Wait()
			}()
			defer func() { mcancel(); <-mdone }()
			stopBackups := sync.OnceFunc(func() { bcancel(); <-done })
			defer stopBackups()
			o.BeforeStop = stopBackups
			o.NewestBackup = func() int64 { return backup.NewestBackedUpRevision(filepath.Join(dir, "status")) }
			a := agentpkg.New(o)
			// A member pod's probes and member lease (pod.go).
			stopPod, err := pod.start(ctx, a, log)
			if err != nil {
				return err
			}
			defer stopPod()
			return cli.Hint(a.Run(ctx), agentpkg.ErrSocketPathTooLong, "use a shorter --dir or --socket")
		},
	}
	cmd.Flags().StringVar(&name, "name", "local", "agent name, as in the cluster spec's agents list (a joined host's comes from DIR/agent.yaml)")
	cmd.Flags().StringVar(&socket, "socket", "", "Unix socket of the API (default DIR/run/agent.sock; DIR/run/agent-NAME.sock for other names)")
	cmd.Flags().StringVar(&joinFile, "join", "", "join a multi-host cluster with this host's join `FILE` (written by steward init or steward host add)")
	cmd.Flags().StringVar(&store, "binary-store", "", "binary store of members configured from another host (default DIR/binaries)")
	cmd.Flags().StringVar(&kubeManifests, "kube-manifests", "", "this host's static pod `DIR` of manifests (kubeadm's /etc/kubernetes/manifests): steward kube upgrade apply rewrites the control plane's manifests through the agent")
	cmd.Flags().StringVar(&listenAddr, "listen-address", "", "pod mode: the agent API and the members listen on this IP address (the pod's, or 0.0.0.0) and advertise the join file's host name; a directory that already joined keeps its identity and ignores --join")
	// A member pod's flags (pod.go).
	pod.register(cmd.Flags())
	cmd.AddCommand(newInstallCommand(g), newPrepareVolumeCommand())
	return cmd
}

func newInstallCommand(g *cli.Globals) *cobra.Command {
	var user, unitDir, store string
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Write the systemd unit that runs this host's agent",
		Long: `Write UNIT-DIR/steward-agent.service, which runs 'steward agent --dir DIR' as USER and
restarts it whatever ends it, then print the commands that enable it. Join the
host first ('steward agent --dir DIR --join FILE' once, or let the unit's first
run do it by passing --join through 'steward agent' by hand).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := g.StewardDir()
			if err != nil {
				return err
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			if exe, err = filepath.EvalSymlinks(exe); err != nil {
				return err
			}
			var args []string
			if store != "" {
				abs, err := filepath.Abs(store)
				if err != nil {
					return err
				}
				args = append(args, "--binary-store", abs)
			}
			unit, err := agentpkg.SystemdUnit(agentpkg.UnitOptions{Binary: exe, Dir: dir, User: user, Args: args})
			if err != nil {
				return err
			}
			if _, err := os.Stat(unitDir); err != nil {
				return fmt.Errorf("unit directory %s: %w (is this a systemd host? give --unit-dir)", unitDir, err)
			}
			p := filepath.Join(unitDir, "steward-agent.service")
			if err := atomicfile.WriteFile(p, []byte(unit), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\nenable it with:\n  systemctl daemon-reload && systemctl enable --now steward-agent\n", p)
			return nil
		},
	}
	cmd.Flags().StringVar(&user, "user", "root", "user the agent and its members run as (it must own DIR)")
	cmd.Flags().StringVar(&unitDir, "unit-dir", "/etc/systemd/system", "where systemd units go")
	cmd.Flags().StringVar(&store, "binary-store", "", "binary store the agent runs members from (default DIR/binaries)")
	return cmd
}

// joinedAlready reports whether dir already joined as the agent of the
// join file at path, of the same cluster: a member pod restarts with the
// same --join flag, and its file (valid for a while only) is not needed
// again. An unreadable file or identity: false (the join then says why).
func joinedAlready(dir, path string) bool {
	id, err := join.LoadIdentity(dir)
	if err != nil {
		return false
	}
	f, err := join.Read(path)
	if err != nil {
		return false
	}
	return id.Agent == f.Agent && id.ClusterToken == f.ClusterToken
}

// joinHint adds to a refused join file how to get a good one: a new file
// from the coordinator (`steward host add`), or another directory for
// another cluster.
func joinHint(err error, f *join.File) error {
	err = cli.Advise(err, join.ErrIncomplete, ": write a new one with `steward host add`")
	err = cli.Advise(err, join.ErrExpired, fmt.Sprintf(": write a new one on the coordinator with `steward host add %s=%s`", f.Agent, f.Host))
	return cli.Advise(err, join.ErrOtherCluster, "; use another --dir for the other cluster")
}
