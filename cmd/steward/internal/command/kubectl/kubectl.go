// Package kubectl is `steward kubectl`, the kubectl plugin: the steward
// binary installed (or symlinked) as kubectl-steward on the PATH is found
// by kubectl as `kubectl steward`, and runs these commands (main.go
// dispatches on the name it was started as).
package kubectl

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/operator"
)

// PluginName is the executable name kubectl looks for to run `kubectl
// steward`.
const PluginName = "kubectl-steward"

type flags struct {
	kubeconfig, context, namespace string
}

// NewCommand returns the kubectl plugin's command tree.
func NewCommand(g *cli.Globals) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "kubectl",
		Short: "The kubectl plugin: status, backups and operations of an EtcdCluster",
		Long: `Show an EtcdCluster the operator runs the way steward status shows a cluster on
hosts. Install the steward binary as ` + PluginName + ` on the PATH (a copy or a
symlink: ln -s $(command -v steward) /usr/local/bin/` + PluginName + `) and kubectl
finds it as "kubectl steward"; "steward kubectl" is the same command.`,
	}
	cmd.PersistentFlags().StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, else ~/.kube/config)")
	cmd.PersistentFlags().StringVar(&f.context, "context", "", "kubeconfig context (default its current context)")
	cmd.PersistentFlags().StringVarP(&f.namespace, "namespace", "n", "", "namespace of the EtcdCluster (default the context's)")
	cmd.AddCommand(statusCommand(g, f), backupsCommand(g, f), plansCommand(g, f))
	return cmd
}

func (f *flags) client() (client.Client, string, error) {
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: f.kubeconfig, Precedence: clientcmd.NewDefaultClientConfigLoadingRules().Precedence},
		&clientcmd.ConfigOverrides{CurrentContext: f.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	ns := f.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil || ns == "" {
			ns = "default"
		}
	}
	scheme, err := operator.Scheme()
	if err != nil {
		return nil, "", err
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	return cl, ns, err
}

func (f *flags) inspect(cmd *cobra.Command, g *cli.Globals, name string, withBackups bool) (*operator.View, error) {
	if err := g.CheckOutput(); err != nil {
		return nil, err
	}
	cl, ns, err := f.client()
	if err != nil {
		return nil, err
	}
	return operator.Inspect(cmd.Context(), cl, ns, name, withBackups)
}

func statusCommand(g *cli.Globals, f *flags) *cobra.Command {
	return &cobra.Command{
		Use:   "status NAME",
		Short: "Show an EtcdCluster's members, conditions, version, leader, last operation and backups",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := f.inspect(cmd, g, args[0], true)
			if err != nil {
				return err
			}
			return g.Print(cmd.OutOrStdout(), v, func(tw *tabwriter.Writer) { StatusTable(tw, v, time.Now()) })
		},
	}
}

func backupsCommand(g *cli.Globals, f *flags) *cobra.Command {
	return &cobra.Command{
		Use:   "backups NAME",
		Short: "List the backups of an EtcdCluster's store (spec.backup), trusted under the cluster backup key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := f.inspect(cmd, g, args[0], true)
			if err != nil {
				return err
			}
			if v.Backups == nil {
				return fmt.Errorf("EtcdCluster %s/%s has no backup store: set spec.backup.s3", v.Namespace, v.Name)
			}
			return g.Print(cmd.OutOrStdout(), v.Backups, func(tw *tabwriter.Writer) { BackupsTable(tw, v.Backups) })
		},
	}
}

func plansCommand(g *cli.Globals, f *flags) *cobra.Command {
	return &cobra.Command{
		Use:   "plans NAME",
		Short: "Show an EtcdCluster's last operation and whether an upgrade or rollback plan runs",
		Long: `The operator keeps its plans in its own state directory; from outside it shows
the last operation (status.lastOperation: type, state, plan, description, times)
and the UpgradeInProgress condition.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := f.inspect(cmd, g, args[0], false)
			if err != nil {
				return err
			}
			out := planView{LastOperation: v.LastOperation}
			if c := meta.FindStatusCondition(v.Conditions, v1alpha1.ConditionUpgradeInProgress); c != nil {
				out.UpgradeInProgress = c
			}
			return g.Print(cmd.OutOrStdout(), out, func(tw *tabwriter.Writer) { planTable(tw, out) })
		},
	}
}

type planView struct {
	LastOperation     *v1alpha1.Operation `json:"lastOperation,omitempty"`
	UpgradeInProgress any                 `json:"upgradeInProgress,omitempty"`
}

func planTable(tw *tabwriter.Writer, p planView) {
	if op := p.LastOperation; op != nil {
		end := "-"
		if op.EndTime != nil {
			end = op.EndTime.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "OPERATION\tSTATE\tPLAN\tSTARTED\tENDED\tDESCRIPTION\n")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", op.Type, op.State, dash(op.Plan), op.StartTime.UTC().Format(time.RFC3339), end, op.Description)
	} else {
		fmt.Fprintln(tw, "no operation yet")
	}
}

// StatusTable writes the table form of `kubectl steward status`.
func StatusTable(w io.Writer, v *operator.View, now time.Time) {
	fmt.Fprintf(w, "EtcdCluster %s/%s: %d/%d ready, etcd %s, cluster %s, leader %s\n",
		v.Namespace, v.Name, v.ReadyReplicas, v.Replicas, dash(v.Version), dash(v.ClusterID), dash(v.Leader))
	if v.RestoredFrom != "" {
		fmt.Fprintf(w, "restored from %s\n", v.RestoredFrom)
	}
	fmt.Fprintf(w, "\nMEMBER\tID\tROLE\tREADY\tVERSION\tREASON\n")
	for _, m := range v.Members {
		fmt.Fprintf(w, "%s\t%s\t%s\t%t\t%s\t%s\n", m.Name, dash(m.ID), dash(m.Role), m.Ready, dash(m.Version), dash(m.Reason))
	}
	fmt.Fprintf(w, "\nCONDITION\tSTATUS\tREASON\tSINCE\tMESSAGE\n")
	for _, c := range v.Conditions {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, age(now, c.LastTransitionTime.Time), c.Message)
	}
	if op := v.LastOperation; op != nil {
		fmt.Fprintf(w, "\nlast operation: %s %s: %s\n", op.Type, op.State, op.Description)
	}
	if v.Backups != nil {
		n := len(v.Backups.Backups)
		last := "none"
		if n > 0 {
			m := v.Backups.Backups[n-1]
			last = fmt.Sprintf("%s (revision %d, %s ago)", m.ID, m.EndRevision, age(now, m.CreatedAt))
		}
		fmt.Fprintf(w, "backups: %d in %s, newest %s\n", n, v.Backups.Store, last)
		if v.Backups.Error != "" {
			fmt.Fprintf(w, "backups: %s\n", v.Backups.Error)
		}
	}
}

// BackupsTable writes the table form of `kubectl steward backups`.
func BackupsTable(w io.Writer, b *operator.BackupsView) {
	if b.Error != "" {
		fmt.Fprintf(w, "%s: %s\n", b.Store, b.Error)
		return
	}
	fmt.Fprintf(w, "ID\tKIND\tCLUSTER\tREVISIONS\tSIZE\tCREATED\n")
	for _, m := range b.Backups {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d-%d\t%d\t%s\n", m.ID, m.Kind, m.ClusterID, m.StartRevision, m.EndRevision, m.Size, m.CreatedAt.UTC().Format(time.RFC3339))
	}
	for _, i := range b.Ignored {
		fmt.Fprintf(w, "ignored: %s\n", strings.TrimSpace(i))
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Truncate(time.Second).String()
}
