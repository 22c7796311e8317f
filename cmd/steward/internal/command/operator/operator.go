// Package operator is the `steward operator` command: Steward's Kubernetes
// operator (pkg/operator) in the foreground, as its Deployment runs it.
package operator

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/operator"
)

// NewCommand returns the operator command.
func NewCommand(_ *cli.Globals) *cobra.Command {
	var cfg operator.Config
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Run Steward's Kubernetes operator: etcd clusters of pods from EtcdCluster resources",
		Long: `Run the operator in the foreground (its Deployment in deploy/operator does). For each
EtcdCluster it keeps a Steward directory under --state-dir (NAMESPACE/NAME), makes the
member pods (a StatefulSet running 'steward agent' in pod mode), the Services NAME-peer and
NAME-client, the Secrets NAME-ca (the CA certificate), NAME-join, NAME-backup-key and NAME-client-tls
and a PodDisruptionBudget,
starts the cluster once every pod's agent answers, and reports its status every 10 s.
It reaches the Kubernetes API in-cluster or through KUBECONFIG, and the member pods by
their DNS names: run it inside the cluster (docs/operator.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.StateDir == "" {
				return errors.New("--state-dir is empty: give the directory the operator keeps each cluster's Steward directory in (its Deployment mounts a volume at /var/lib/steward-operator)")
			}
			ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(cmd.ErrOrStderr(), nil)))
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			if err := operator.Run(ctx, cfg); err != nil {
				err = cli.Advise(err, operator.ErrNoMemberImage, "; give --member-image (the Steward image, steward.etcd.io/steward:VERSION as `make images` tags it)")
				return fmt.Errorf("operator: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.StateDir, "state-dir", "/var/lib/steward-operator", "directory of the clusters' Steward directories (NAMESPACE/NAME)")
	f.StringVar(&cfg.MetricsAddress, "metrics-address", ":8080", "address of the Prometheus metrics endpoint (0: none)")
	f.StringVar(&cfg.HealthAddress, "health-address", ":8081", "address of /healthz and /readyz (0: none)")
	f.BoolVar(&cfg.LeaderElect, "leader-elect", false, "act only while holding the leader Lease (run several replicas safely)")
	f.StringVar(&cfg.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader Lease (default: the operator's own, in-cluster; --namespace when given)")
	f.StringVar(&cfg.Namespace, "namespace", "", "watch EtcdClusters of this namespace only (default: all)")
	f.StringVar(&cfg.MemberImage, "member-image", os.Getenv("STEWARD_MEMBER_IMAGE"), "Steward image of the member pods (default $STEWARD_MEMBER_IMAGE, else the image of the operator's own pod, from POD_NAMESPACE and POD_NAME)")
	f.StringVar(&cfg.PullPolicy, "member-image-pull-policy", "IfNotPresent", "pull policy of the member image")
	f.StringVar(&cfg.BinaryStore, "binary-store", "/opt/steward/binaries", "store of etcd versions where spec.version is checked (the image's)")
	f.StringVar(&cfg.ClusterDomain, "cluster-domain", operator.DefaultClusterDomain, "the Kubernetes cluster's DNS domain")
	return cmd
}
