// Package up is the `steward up` command.
package up

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/bootstrap"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/spec"
)

// NewCommand returns the up command.
func NewCommand(g *cli.Globals) *cobra.Command {
	var o bootstrap.UpOptions
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local cluster (writing a default cluster.yaml when there is none) and wait until it is healthy",
		Long: `Start the cluster of the Steward directory. Without a cluster.yaml, write a default
one: N members on 127.0.0.1 (or --address) with free ports, TLS on, the embedded etcd version unless
--version says otherwise, and the agent serving Prometheus metrics on the members' loopback
address at a free port (--no-metrics: none). With an existing directory, start what is there again,
keeping the data. Returns when every member is healthy and prints the endpoints.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("members") && o.Members < 1 {
				// 0 is the option's "default" (3); given on the command
				// line it is a mistake, not a request for the default.
				return upHint(fmt.Errorf("%w, got %d", spec.ErrTooFewMembers, o.Members))
			}
			dir, err := g.StewardDir()
			if err != nil {
				return err
			}
			errw := cmd.ErrOrStderr()
			progress := cli.Progress(errw)
			c, warnings, err := bootstrap.Up(cmd.Context(), dir, o, progress)
			for _, w := range warnings {
				fmt.Fprintln(errw, "warning:", w)
			}
			if err != nil {
				return cli.RestorePendingHint(upHint(err))
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "cluster %s is healthy: %d members, etcd %s\n", c.Spec.Name, len(c.Spec.Members), c.Spec.Version)
			fmt.Fprintf(out, "endpoints: %s\n", strings.Join(c.Spec.ClientURLs(), ","))
			// The binary as the user typed it (bin/steward, ./steward, a
			// path), so the lines can be pasted as they are.
			fmt.Fprintf(out, "etcdctl: %s etcdctl --dir %s endpoint status -w table\n", os.Args[0], dir)
			fmt.Fprintf(out, "or: eval \"$(%s env --dir %s)\"\n", os.Args[0], dir)
			return nil
		},
	}
	cmd.Flags().IntVar(&o.Members, "members", 0, "number of members of a new cluster (default 3)")
	cmd.Flags().StringVar(&o.Version, "version", "", "etcd version of a new cluster (default: the embedded version)")
	cmd.Flags().BoolVar(&o.TLSOff, "insecure-no-tls", false, "write a new spec with TLS off (anyone reaching the ports owns the data)")
	cmd.Flags().StringVar(&o.BinaryStore, "binary-store", "", "binary store of a new cluster (default DIR/binaries)")
	cmd.Flags().StringVar(&o.Address, "address", "", "IP address the members of a new cluster listen on (default 127.0.0.1; another loopback address such as 127.0.0.2 keeps clusters on one machine off each other's ports)")
	cmd.Flags().BoolVar(&o.NoMetrics, "no-metrics", false, "write a new spec whose agent serves no Prometheus metrics (by default: on loopback, at the spec's agents[].metricsAddress)")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 2*time.Minute, "how long to wait for a healthy cluster")
	return cmd
}

// newClusterFlags are the flags of the bootstrap.UpOptions fields that
// shape a new spec.
var newClusterFlags = map[string]string{
	"Members":     "--members",
	"Version":     "--version",
	"TLSOff":      "--insecure-no-tls",
	"BinaryStore": "--binary-store",
	"Address":     "--address",
	"NoMetrics":   "--no-metrics",
}

// upHint names the flag behind a refused option, and the command that
// starts an agent that does not answer.
func upHint(err error) error {
	if oe, ok := errors.AsType[*bootstrap.OptionError](err); ok && newClusterFlags[oe.Option] != "" {
		if oe.Option == "Members" {
			// The count of an existing cluster changes member by member.
			return fmt.Errorf("%s: %w (use `steward member add` or `remove`)", newClusterFlags[oe.Option], err)
		}
		return fmt.Errorf("%s: %w", newClusterFlags[oe.Option], err)
	}
	if errors.Is(err, bootstrap.ErrAddress) {
		return fmt.Errorf("--address: %w", err)
	}
	if errors.Is(err, spec.ErrTooFewMembers) {
		return fmt.Errorf("--members: %w", err)
	}
	if errors.Is(err, cluster.ErrExternal) {
		return cli.AdoptHint(err)
	}
	if ad, ok := errors.AsType[*bootstrap.AgentDownError](err); ok {
		if ad.JoinFile != "" {
			return fmt.Errorf("%w; on host %s, run `steward agent --dir DIR --join %s` the first time, or start its service (`systemctl start steward-agent`)", err, ad.Agent, ad.JoinFile)
		}
		return fmt.Errorf("%w (`steward agent --name %s`)", err, ad.Agent)
	}
	return err
}
