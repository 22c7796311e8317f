// Package attach is the `steward attach` command: a spec for a cluster
// Steward did not create and does not run.
package attach

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/bootstrap"
)

// Result is what attach prints (-o json|yaml field names are stable).
type Result struct {
	Cluster   string   `json:"cluster"`
	ClusterID string   `json:"clusterID"`
	Version   string   `json:"version"`
	Spec      string   `json:"spec"`
	Members   []Member `json:"members"`
}

// Member is one member found in etcd's member list.
type Member struct {
	Name      string `json:"name"`
	ClientURL string `json:"clientURL"`
	PeerURL   string `json:"peerURL"`
}

// NewCommand returns the attach command.
func NewCommand(g *cli.Globals) *cobra.Command {
	var o bootstrap.AttachOptions
	var endpoints []string
	cmd := &cobra.Command{
		Use:   "attach --endpoints URL,... --cacert FILE --cert FILE --key FILE",
		Short: "Write a spec for an etcd cluster Steward did not create (backups and inspection, no process control)",
		Long: `Attach an existing etcd cluster that someone else runs (kubeadm's static pods,
systemd units, ...). Every endpoint must answer, with the certificate given, as a member
of one and the same cluster; the members are read from etcd's member list. The spec
written to the Steward directory marks the cluster external and names the certificate
files, which Steward reads and never rewrites.

Afterwards everything that only needs the etcd API works: status, env, backup, restore
into a new Steward cluster, defrag, alarm, leader move, inspect, migrate. Commands that
need the member processes refuse: ` + "`steward adopt`" + ` hands them to Steward. See docs/attach.md.`,
		Example: `  steward attach --dir /var/lib/steward/kube-etcd \
    --endpoints https://10.0.0.11:2379,https://10.0.0.12:2379,https://10.0.0.13:2379 \
    --cacert /etc/kubernetes/pki/etcd/ca.crt \
    --cert /etc/kubernetes/pki/apiserver-etcd-client.crt \
    --key /etc/kubernetes/pki/apiserver-etcd-client.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.CheckOutput(); err != nil {
				return err
			}
			dir, err := g.StewardDir()
			if err != nil {
				return err
			}
			o.Endpoints = endpoints
			c, err := bootstrap.Attach(cmd.Context(), dir, o, cli.Progress(cmd.ErrOrStderr()))
			if err != nil && c != nil {
				return fmt.Errorf("%w (run it in the foreground with `steward agent --dir %s` to see why)", err, dir)
			}
			if err != nil {
				err = cli.Hint(err, bootstrap.ErrDirHoldsCluster, "give another --dir, or look at it with `steward status --dir "+dir+"`")
				err = cli.Hint(err, bootstrap.ErrCertificate, "check --cacert, --cert and --key (the files etcdctl would be given)")
				err = cli.Hint(err, bootstrap.ErrEndpoint, "check --endpoints (each member's client URL)")
				err = cli.Hint(err, bootstrap.ErrMetricsAddress, "give --continuous with a loopback --metrics-address such as 127.0.0.1:9479, or leave it out")
				return cli.Hint(err, bootstrap.ErrMixedClusters, "give --endpoints of one cluster")
			}
			r := Result{Cluster: c.Spec.Name, ClusterID: c.Spec.External.ClusterID, Version: c.Spec.Version, Spec: c.SpecPath()}
			for _, m := range c.Spec.Members {
				r.Members = append(r.Members, Member{Name: m.Name, ClientURL: m.ClientURL, PeerURL: m.PeerURL})
			}
			return g.Print(cmd.OutOrStdout(), r, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "attached cluster %s (ID %s, etcd %s): %s\n\n", r.Cluster, r.ClusterID, r.Version, r.Spec)
				fmt.Fprintf(tw, "MEMBER\tCLIENT URL\tPEER URL\n")
				for _, m := range r.Members {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Name, m.ClientURL, m.PeerURL)
				}
			})
		},
	}
	cmd.Flags().StringSliceVar(&endpoints, "endpoints", nil, "client URLs of the cluster's members, comma-separated (required)")
	cmd.Flags().StringVar(&o.CAFile, "cacert", "", "CA bundle that verifies the members' serving certificates")
	cmd.Flags().StringVar(&o.CertFile, "cert", "", "client certificate the members trust")
	cmd.Flags().StringVar(&o.KeyFile, "key", "", "key of the client certificate")
	cmd.Flags().StringVar(&o.Name, "name", "", "name of the cluster in the spec (default etcd)")
	cmd.Flags().BoolVar(&o.Continuous, "continuous", false, "turn on continuous backups, run by this machine's agent (started in the background)")
	cmd.Flags().StringVar(&o.MetricsAddress, "metrics-address", "", "with --continuous: loopback HOST:PORT where the agent serves Prometheus metrics")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 5*time.Second, "how long each endpoint may take to answer")
	_ = cmd.MarkFlagRequired("endpoints")
	return cmd
}
