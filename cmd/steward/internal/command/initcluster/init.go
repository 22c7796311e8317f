// Package initcluster is the `steward init` command: a new cluster spread
// over several hosts, written on the coordinator with one join file per host.
package initcluster

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/bootstrap"
	"github.com/etcd-steward/steward/pkg/join"
	"github.com/etcd-steward/steward/pkg/spec"
)

// NewCommand returns the init command.
func NewCommand(g *cli.Globals) *cobra.Command {
	var (
		o     bootstrap.InitOptions
		hosts []string
		s3    cli.S3Flags
	)
	cmd := &cobra.Command{
		Use:   "init --host NAME=ADDRESS [--host ...]",
		Short: "Write a new multi-host cluster: its spec, CA, admin certificate and one join file per host",
		Long: `Write a new cluster whose members live on several hosts, in the Steward directory of
this machine (the coordinator): DIR/cluster.yaml with one agent per host and the members
spread over them, the CA and the admin client certificate in DIR/pki, and for each host
DIR/join/NAME.yaml (0600), which holds that host's identity, certificates and keys.

Copy each join file to its host and run the agent there ('steward agent --dir HOSTDIR
--join FILE'); then 'steward up' on this machine starts the cluster through them.
Join files expire (--join-validity); 'steward host add NAME=ADDRESS' writes a new one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := g.StewardDir()
			if err != nil {
				return err
			}
			if len(hosts) == 0 {
				return fmt.Errorf("no hosts: give one --host NAME=ADDRESS per host (for a cluster on this machine only, use `steward up`)")
			}
			for _, h := range hosts {
				ph, err := spec.ParseHost(h)
				if err != nil {
					return err
				}
				o.Hosts = append(o.Hosts, ph)
			}
			if o.S3, err = s3.Store(); err != nil {
				return err
			}
			errw := cmd.ErrOrStderr()
			c, warnings, err := bootstrap.Init(cmd.Context(), dir, o, cli.Progress(errw))
			for _, w := range warnings {
				fmt.Fprintln(errw, "warning:", w)
			}
			if errors.Is(err, spec.ErrTooFewMembers) {
				return fmt.Errorf("--members must be at least 1, got %d", o.Members)
			}
			if err != nil {
				return cli.Advise(err, bootstrap.ErrDirHoldsCluster, " (add hosts with `steward host add`, or init another --dir)")
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "cluster %s: %d members on %d hosts, etcd %s\n", c.Spec.Name, len(c.Spec.Members), len(c.Spec.Agents), c.Spec.Version)
			fmt.Fprintf(out, "on each host, copy its join file there and run the agent (keep it running: `steward agent install` writes a systemd unit):\n")
			for _, a := range c.Spec.Agents {
				var on []string
				for _, m := range c.Spec.Members {
					if m.Agent == a.Name {
						on = append(on, m.Name)
					}
				}
				fmt.Fprintf(out, "  %s (%s; %s): steward agent --dir /var/lib/steward --join %s\n",
					a.Name, a.Host, strings.Join(on, ", "), bootstrap.JoinPath(dir, a.Name))
			}
			fmt.Fprintf(out, "then, here: steward up --dir %s\n", dir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&hosts, "host", nil, "a host of the cluster, NAME=ADDRESS (repeat for each; its agent and members bind ADDRESS)")
	f.IntVar(&o.Members, "members", 0, "number of members, spread over the hosts in order (default: one per host)")
	f.StringVar(&o.Version, "version", "", "etcd version (default: the embedded version)")
	f.StringVar(&o.Name, "name", "steward", "cluster name")
	f.IntVar(&o.AgentPort, "agent-port", spec.DefaultAgentPort, "agent API port on every host (mutual TLS)")
	f.IntVar(&o.ClientPort, "client-port", 2379, "client port of a host's first member (the next ones add 10)")
	f.IntVar(&o.PeerPort, "peer-port", 2380, "peer port of a host's first member (the next ones add 10)")
	f.StringVar(&o.BinaryStore, "binary-store", "", "binary store on this machine (default DIR/binaries)")
	f.DurationVar(&o.JoinValidity, "join-validity", join.DefaultValidity, "how long the join files can be used")
	s3.Add(f, "for backups (every host must reach it; turns continuous backups on)")
	return cmd
}
