// Package kube is the `steward kube` command: the Kubernetes above the
// etcd cluster: which versions run where (`kube versions`), the dry run
// of an upgrade (`kube upgrade plan`), the upgrade (`kube upgrade
// apply`) and its rollback (`kube rollback`), over pkg/kubeupgrade.
package kube

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/kstorage"
	"github.com/etcd-steward/steward/pkg/kubeupgrade"
	"github.com/etcd-steward/steward/pkg/kubeversion"
)

// NewCommand returns the kube command.
func NewCommand(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "kube", Short: "The Kubernetes above the cluster: versions running, upgrade plans, rollback"}
	cmd.AddCommand(versionsCommand(g), upgradeCommand(g), rollbackCommand(g))
	return cmd
}

type kubeOptions struct {
	kubeconfig string
}

func (o *kubeOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the Kubernetes (default $KUBECONFIG, else the kubeconfig of the local Kubernetes whose directory holds the Steward directory)")
}

// kubeconfig resolves the kubeconfig and says on stderr which one it chose.
func (o *kubeOptions) resolve(cmd *cobra.Command, g *cli.Globals) (kubeupgrade.Kubeconfig, error) {
	dir, err := g.StewardDir()
	if err != nil {
		return kubeupgrade.Kubeconfig{}, err
	}
	path, source, err := kubeupgrade.ResolveKubeconfig(o.kubeconfig, os.Getenv("KUBECONFIG"), dir)
	if err != nil {
		return kubeupgrade.Kubeconfig{}, cli.Advise(err, kubeupgrade.ErrNoKubeconfig, ": give --kubeconfig FILE or set KUBECONFIG")
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "kubeconfig %s (%s)\n", path, describeSource(source))
	return kubeupgrade.Kubeconfig{Path: path, Source: source}, nil
}

func describeSource(s string) string {
	switch s {
	case kubeupgrade.FromFlag:
		return "from --kubeconfig"
	case kubeupgrade.FromEnv:
		return "from $KUBECONFIG"
	}
	return "the local Kubernetes' kubeconfig beside the Steward directory"
}

// versionsOutput is `kube versions -o json|yaml`.
type versionsOutput struct {
	Kubeconfig kubeupgrade.Kubeconfig     `json:"kubeconfig"`
	Versions   []kubeversion.VersionState `json:"versions"`
	// Hosts are what runs on each host, behind the states.
	Hosts []hostOutput `json:"hosts"`
}

type hostOutput struct {
	Host       string                 `json:"host"`
	Components []kubeversion.Instance `json:"components"`
}

func versionsCommand(g *cli.Globals) *cobra.Command {
	var o kubeOptions
	var kubeCache, images string
	cmd := &cobra.Command{
		Use:   "versions",
		Short: "List each Kubernetes version Steward knows as active, partial, available or unavailable",
		Long: `List every Kubernetes version Steward knows (and any other version that runs)
with its state, computed from what each host runs: the image tag of each
control-plane static pod (its mirror pod, by its component label and node) and
each node's kubelet version.

  active       every component on every host runs it
  partial      some components run it
  available    nothing runs it; its kubelet binary (--kube-cache, default
               $STEWARD_KUBE_CACHE: hack/build-kube.sh's VERSION/bin) and its
               control-plane images (--images, default $STEWARD_IMAGES:
               images.json) are present
  unavailable  nothing runs it and something it needs is missing (listed)

Below it, the table per host and component behind the states.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.CheckOutput(); err != nil {
				return err
			}
			kc, err := o.resolve(cmd, g)
			if err != nil {
				return fmt.Errorf("kube versions: %w", err)
			}
			out, err := versions(cmd, kc, envOr(kubeCache, "STEWARD_KUBE_CACHE"), envOr(images, "STEWARD_IMAGES"))
			if err != nil {
				return fmt.Errorf("kube versions: %w", err)
			}
			return g.Print(cmd.OutOrStdout(), out, func(tw *tabwriter.Writer) { versionsTable(tw, out) })
		},
	}
	o.addFlags(cmd)
	cmd.Flags().StringVar(&kubeCache, "kube-cache", "", "the Kubernetes binaries, one VERSION/bin directory per version (default $STEWARD_KUBE_CACHE)")
	cmd.Flags().StringVar(&images, "images", "", "the image directory with its images.json (default $STEWARD_IMAGES)")
	return cmd
}

func envOr(v, env string) string {
	if v != "" {
		return v
	}
	return os.Getenv(env)
}

func versions(cmd *cobra.Command, kc kubeupgrade.Kubeconfig, kubeCache, images string) (versionsOutput, error) {
	cs, err := kc.Client()
	if err != nil {
		return versionsOutput{}, err
	}
	run, err := kubeupgrade.Observe(cmd.Context(), cs)
	if err != nil {
		return versionsOutput{}, err
	}
	out := versionsOutput{Kubeconfig: kc, Versions: kubeupgrade.Versions(run, kubeupgrade.Missing(kubeCache, images)), Hosts: []hostOutput{}}
	for _, in := range run.Instances {
		if n := len(out.Hosts); n == 0 || out.Hosts[n-1].Host != in.Host {
			out.Hosts = append(out.Hosts, hostOutput{Host: in.Host})
		}
		h := &out.Hosts[len(out.Hosts)-1]
		h.Components = append(h.Components, in)
	}
	return out, nil
}

func versionsTable(w io.Writer, out versionsOutput) {
	fmt.Fprintln(w, "VERSION\tSTATE\tKNOWN\tRUNNING\tHOSTS\tETCD TESTED\tMISSING")
	for _, v := range out.Versions {
		fmt.Fprintf(w, "%s\t%s\t%v\t%d/%d\t%s\t%s\t%s\n", v.Version, v.State, v.Known, v.Running, v.Components,
			dash(strings.Join(v.Hosts, ",")), dash(v.EtcdVersion), dash(strings.Join(v.Missing, "; ")))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "HOST\tCOMPONENT\tVERSION\tIMAGE")
	for _, h := range out.Hosts {
		for _, c := range h.Components {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", h.Host, c.Component, c.Version, dash(c.Image))
		}
	}
}

func upgradeCommand(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "upgrade", Short: "Upgrade the Kubernetes above the cluster (plan: the dry run; apply: the upgrade, as a persisted plan)"}
	cmd.AddCommand(planCommand(g), applyCommand(g))
	return cmd
}

func applyCommand(g *cli.Globals) *cobra.Command {
	var o kubeOptions
	var to, prefix string
	cmd := &cobra.Command{
		Use:   "apply --to vX.Y.Z",
		Short: "Upgrade the Kubernetes control plane above this etcd cluster to --to, as a persisted, resumable plan",
		Long: `Run the dry run of 'steward kube upgrade plan --to' and, when every pre-flight
check passes, record a kube-upgrade plan and run it: etcd first when the target
is tested with a newer etcd; then each host's kube-apiserver, one at a time
(never two down: the others ready first), its static pod manifest rewritten
through the host's Steward agent (which keeps the manifest before the plan
until the plan is done) with the target's image, flags and graceful-shutdown
flags, and ready at its own address (/version the target, /readyz 200) before
the next; then each host's controller-manager and scheduler (the leaders'
host last); then the storage migration of every resource whose storage version
hash changed. Kubelets are left as they are (within the skew policy).

A component moved to a new minor first runs with --emulated-version of the old
minor (the old minor's APIs and features on the new binary); the step
switching-emulated-version, after every component runs the target, removes it,
one API server at a time: that step is the point of no return, before which
'steward kube rollback' brings everything back without losing an object.

A failed or interrupted plan continues with 'steward plan resume' from where
the hosts are; 'steward plan abort' stops it after its current step.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := runApply(cmd, g, o, to, prefix); err != nil {
				return applyHint(fmt.Errorf("kube upgrade apply: %w", err))
			}
			return nil
		},
	}
	o.addFlags(cmd)
	cmd.Flags().StringVar(&to, "to", "", "the Kubernetes version to upgrade to (vX.Y.Z)")
	cmd.Flags().StringVar(&prefix, "prefix", kstorage.DefaultPrefix, "the API servers' --etcd-prefix")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func runApply(cmd *cobra.Command, g *cli.Globals, o kubeOptions, to, prefix string) error {
	kc, cfg, err := o.target(cmd, g, to)
	if err != nil {
		return err
	}
	c, err := g.ClusterWithAgent(cmd)
	if err != nil {
		return err
	}
	dry, p, err := kubeupgrade.Apply(cmd.Context(), c, cfg, kubeupgrade.ApplyOptions{PlanOptions: kubeupgrade.PlanOptions{Target: to, Prefix: prefix}, Kubeconfig: kc.Path})
	if dry != nil && p == nil && err != nil && dry.Refusal() != nil {
		// Refused by pre-flight: the dry run shows why, as plan does.
		_ = g.Print(cmd.OutOrStdout(), planOutput{Kubeconfig: kc, Plan: dry}, func(tw *tabwriter.Writer) { planTable(tw, dry) })
	}
	if p != nil {
		if latest, gerr := c.Plans().Get(p.ID); gerr == nil {
			p = latest
		}
		if perr := g.PrintPlan(cmd.OutOrStdout(), p); perr != nil && err == nil {
			err = perr
		}
	}
	return err
}

// target is what `kube upgrade plan` and `apply` check and read first:
// the output format, the target (one outside the catalogue is refused
// before anything is read), the kubeconfig and its REST config.
func (o kubeOptions) target(cmd *cobra.Command, g *cli.Globals, to string) (kubeupgrade.Kubeconfig, *rest.Config, error) {
	if err := g.CheckOutput(); err != nil {
		return kubeupgrade.Kubeconfig{}, nil, err
	}
	if _, _, err := kubeversion.TargetOf(to); err != nil {
		return kubeupgrade.Kubeconfig{}, nil, err
	}
	kc, err := o.resolve(cmd, g)
	if err != nil {
		return kc, nil, err
	}
	cfg, err := kubeupgrade.RESTConfig(kc.Path)
	return kc, cfg, err
}

// applyHint adds the dry run's advice, the agent flag a host lacks, and
// what to do after a failed step.
func applyHint(err error) error {
	err = advise(err)
	err = cli.Advise(err, kubeupgrade.ErrNoManifestsDir, "; restart that host's agent with --kube-manifests DIR (kubeadm's /etc/kubernetes/manifests)")
	return cli.PlanHint(err)
}

// planOutput is `kube upgrade plan -o json|yaml`.
type planOutput struct {
	Kubeconfig kubeupgrade.Kubeconfig `json:"kubeconfig"`
	*kubeversion.Plan
}

func planCommand(g *cli.Globals) *cobra.Command {
	var o kubeOptions
	var to, prefix string
	cmd := &cobra.Command{
		Use:   "plan --to vX.Y.Z",
		Short: "The dry run of a Kubernetes upgrade: every host and component before and after, the etcd steps, stored objects of removed APIs, pre-flight",
		Long: `Show what an upgrade of the Kubernetes above this etcd cluster to --to would do,
changing nothing: per host and component the version and image before and
after and the manifest flags that change; whether etcd is upgraded first (when
the target is tested with a newer etcd than the cluster runs); the stored
objects whose API versions the target no longer serves (the storage-version
inventory, read from etcd itself); the steps in order; and each pre-flight
check: the version skew policy, one minor at a time, kubelets within three
minors of the target, no removed API still stored, every etcd member healthy,
no alarm, every API server ready (/readyz), every certificate valid for a day.

The target must be in Steward's catalogue (steward kube versions). A failed
check refuses the upgrade: the plan is printed and the command exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := runPlan(cmd, g, o, to, prefix); err != nil {
				return advise(fmt.Errorf("kube upgrade plan: %w", err))
			}
			return nil
		},
	}
	o.addFlags(cmd)
	cmd.Flags().StringVar(&to, "to", "", "the Kubernetes version to upgrade to (vX.Y.Z)")
	cmd.Flags().StringVar(&prefix, "prefix", kstorage.DefaultPrefix, "the API servers' --etcd-prefix")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func runPlan(cmd *cobra.Command, g *cli.Globals, o kubeOptions, to, prefix string) error {
	kc, cfg, err := o.target(cmd, g, to)
	if err != nil {
		return err
	}
	c, err := g.Cluster(cmd)
	if err != nil {
		return err
	}
	p, err := kubeupgrade.Plan(cmd.Context(), c, cfg, kubeupgrade.PlanOptions{Target: to, Prefix: prefix})
	if err != nil {
		return err
	}
	if err := g.Print(cmd.OutOrStdout(), planOutput{Kubeconfig: kc, Plan: p}, func(tw *tabwriter.Writer) { planTable(tw, p) }); err != nil {
		return err
	}
	return p.Refusal()
}

// advise adds the commands that resolve each refusal.
func advise(err error) error {
	err = cli.Advise(err, kubeversion.ErrNotInCatalogue, "; `steward kube versions` lists the versions Steward knows")
	return cli.Advise(err, kubeversion.ErrRemovedAPIStored, " (`steward migrate storage RESOURCE` rewrites them; `steward inspect storage-versions` lists them)")
}

func planTable(w io.Writer, p *kubeversion.Plan) {
	fmt.Fprintf(w, "Kubernetes %s -> %s (path: %s)\n\n", strings.Join(p.From, ", "), p.To, dash(strings.Join(p.Path, " -> ")))
	fmt.Fprintln(w, "HOST\tCOMPONENT\tVERSION\tIMAGE\tFLAGS")
	for _, h := range p.Hosts {
		for _, c := range h.Components {
			ver := c.FromVersion + " -> " + c.ToVersion
			img := "-"
			if c.FromImage != "" || c.ToImage != "" {
				img = c.FromImage + " -> " + c.ToImage
			}
			if !c.Changes {
				ver, img = c.FromVersion+" (unchanged)", dash(c.FromImage)
			}
			flags := "no change"
			switch {
			case c.Component == kubeversion.Kubelet:
				flags = "-"
			case !c.FlagsKnown:
				flags = "unknown for this minor"
			case len(c.FlagChanges) > 0:
				var fs []string
				for _, f := range c.FlagChanges {
					fs = append(fs, fmt.Sprintf("--%s %q -> %q", f.Flag, f.From, f.To))
				}
				flags = strings.Join(fs, ", ")
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", h.Host, c.Component, ver, img, flags)
		}
	}
	fmt.Fprintf(w, "\nEtcd: %s\n", p.Etcd.Message)
	if len(p.RemovedAPIs) > 0 {
		fmt.Fprintln(w, "\nSTORED IN A REMOVED API\tAPI VERSION\tOBJECTS\tREMOVED IN\tREPLACEMENT")
		for _, u := range p.RemovedAPIs {
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", u.Resource, u.APIVersion, u.Objects, u.RemovedIn, u.Replacement)
		}
	}
	if p.UncheckedObjects > 0 {
		fmt.Fprintf(w, "Not checked for removed APIs: %d encrypted or undecodable objects.\n", p.UncheckedObjects)
	}
	fmt.Fprintln(w, "\nPRE-FLIGHT\tRESULT\tDETAIL")
	for _, c := range p.Preflight {
		fmt.Fprintf(w, "%s\t%s\t%s\n", c.Name, c.Result, c.Message)
	}
	fmt.Fprintln(w, "\nSTEP\tSTATE\tWHAT")
	for i, s := range p.Steps {
		fmt.Fprintf(w, "%d\t%s\t%s\n", i+1, s.State, s.Description)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func rollbackCommand(g *cli.Globals) *cobra.Command {
	var o kubeOptions
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "rollback [--dry-run]",
		Short: "Roll the latest Kubernetes upgrade back, before its point of no return, keeping every object written",
		Long: `Bring every control-plane component the latest kube-upgrade plan moved back to
the static pod manifest its host's Steward agent kept before the plan, as a
persisted, resumable kube-rollback plan: the upgrade plan is stopped (aborted)
first; then each host's kube-scheduler and kube-controller-manager (never newer
than an API server), then each kube-apiserver one at a time (never two down:
the others ready first; a down one first), each waited for (mirror pod with the
old image, ready, /readyz at its own address); at the end the kept manifests are
removed and the upgrade plan is marked rolled back. Components the upgrade never
wrote are left alone. Nothing written is lost: until the upgrade's point of no
return (its switching-emulated-version step) the new binaries ran with
--emulated-version of the old minor.

Refused, nothing changed: no kube-upgrade plan, a plan of another kind open, the
upgrade past its point of no return, etcd unhealthy, more than one API server
down. etcd, when the upgrade moved it, stays where it is ('steward rollback'
rolls an etcd upgrade back). --dry-run prints the rollback plan, changing
nothing. A failed or interrupted rollback continues with 'steward plan resume'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := runRollback(cmd, g, o, dryRun); err != nil {
				return rollbackHint(fmt.Errorf("kube rollback: %w", err))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the Kubernetes (default: the one the upgrade plan recorded)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the rollback plan and change nothing")
	return cmd
}

func runRollback(cmd *cobra.Command, g *cli.Globals, o kubeOptions, dryRun bool) error {
	if err := g.CheckOutput(); err != nil {
		return err
	}
	c, err := g.ClusterWithAgent(cmd)
	if err != nil {
		return err
	}
	p, err := kubeupgrade.Rollback(cmd.Context(), c, kubeupgrade.RollbackOptions{Kubeconfig: o.kubeconfig, DryRun: dryRun})
	if p != nil {
		if latest, gerr := c.Plans().Get(p.ID); gerr == nil {
			p = latest
		}
		if perr := g.PrintPlan(cmd.OutOrStdout(), p); perr != nil && err == nil {
			err = perr
		}
	}
	return err
}

// rollbackHint adds what to do after each refusal of kube rollback.
func rollbackHint(err error) error {
	err = cli.Advise(err, kubeupgrade.ErrNoUpgradeToRollBack, "; `steward plan show` shows the latest plan")
	err = cli.Advise(err, kubeupgrade.ErrPointOfNoReturn, " (`steward plan resume` finishes the upgrade)")
	err = cli.Advise(err, kubeupgrade.ErrRollbackOpen, ": `steward plan resume` finishes it")
	err = cli.Advise(err, kubeupgrade.ErrPlanOpen, "; `steward plan resume` finishes it, `steward plan abort` stops it")
	err = cli.Advise(err, kubeupgrade.ErrPlanRunning, " (`steward plan abort` stops it after its current step)")
	return cli.PlanHint(err)
}
