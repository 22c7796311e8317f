// Package adopt is the `steward adopt` command: how a member Steward did
// not start runs today and what Steward would run differently (--dry-run),
// and the adopt plan that hands it to this machine's agent.
package adopt

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/adopt"
	"github.com/etcd-steward/steward/pkg/agent"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/catalogue"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/spec"
)

// Result is what `steward adopt --dry-run` prints (-o json|yaml).
type Result struct {
	Member adopt.MemberRun `json:"member"`
	// Differences are the flags Steward would set differently.
	Differences []adopt.Difference `json:"differences"`
	// Problem is why Steward cannot run the member the same way ("" when
	// it can).
	Problem string `json:"problem,omitempty"`
	// MemberID is the member the data dir holds (hex), checked against
	// the attached cluster of the Steward directory; empty when there is
	// none to check against (MemberCheck says so).
	MemberID string `json:"memberID,omitempty"`
	// MemberCheck says whether the data dir was checked against the
	// attached cluster: "passed", "failed", or why it was not checked.
	MemberCheck string `json:"memberCheck"`
}

// NewCommand returns the adopt command.
func NewCommand(g *cli.Globals) *cobra.Command {
	var (
		dryRun         bool
		manifest, unit string
		undo           string
		pid            int
	)
	cmd := &cobra.Command{
		Use:   "adopt [--dry-run] (--manifest FILE | --unit FILE | --pid PID) | adopt --undo NAME",
		Short: "Hand a member of an attached cluster to this machine's agent (--dry-run: only show how it runs)",
		Long: `Read how an etcd member runs today from a kubeadm static pod manifest
(--manifest, ` + adopt.KubeadmManifest + ` by kubeadm), a systemd unit (--unit)
or a running process (--pid: /proc/PID/cmdline and environ), with the etcd
config file any of them names, merged as etcd merges them; print the member
(name, data dir, URLs, TLS files, version, the other flags) and the flags
Steward would set differently. When the Steward directory holds the
attached cluster (` + "`steward attach`" + `), the member's data dir is checked to
hold the member that cluster knows by that name. With --dry-run nothing is changed.

Without --dry-run, the member is taken over by a persisted plan (see
` + "`steward plan show`" + `): every member healthy, leadership moved away, the old
process stopped (a static pod's manifest moved aside first, kept for
undo; a systemd unit disabled when it was enabled, and stopped, through
systemctl), the member recorded in the spec as run by this machine's agent with
the data dir, URLs and certificates it had, started there, and waited for
until healthy and caught up. Its member ID stays. With --unit, systemd must
run the member from that file (its FragmentPath) and the unit be active.

--undo NAME gives an adopted member (or one whose adoption stopped
halfway) back: stopped under the agent (its data dir kept), external again
in the spec, its static pod manifest moved back (the kubelet starts it),
its systemd unit enabled again (when it was) and started, or its old
process restarted with the command line, ETCD_* environment and
working directory the adopt plan recorded.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.CheckOutput(); err != nil {
				return err
			}
			if undo != "" {
				if dryRun || manifest != "" || unit != "" || pid != 0 {
					return errors.New("--undo NAME takes no other flag: it gives the member back as the adopt plan recorded it")
				}
				return undoAdoption(cmd, g, undo)
			}
			given := 0
			for _, s := range []bool{manifest != "", unit != "", pid != 0} {
				if s {
					given++
				}
			}
			if given != 1 {
				return errors.New("give exactly one of --manifest FILE, --unit FILE or --pid PID")
			}
			var (
				run adopt.MemberRun
				err error
			)
			switch {
			case manifest != "":
				run, err = adopt.FromManifestFile(manifest)
			case unit != "":
				run, err = adopt.FromUnitFile(cmd.Context(), unit)
			default:
				run, err = adopt.FromProcess(cmd.Context(), pid)
			}
			if err != nil {
				return err
			}
			if !dryRun {
				return apply(cmd, g, run)
			}
			res := Result{Member: run}
			problem := adopt.Check(run)
			if problem != nil {
				res.Problem = problem.Error()
			}
			// The data dir must hold the member the attached cluster
			// knows by that name (its WAL's member and cluster IDs).
			if dir, derr := g.StewardDir(); derr != nil {
				return derr
			} else if c, oerr := cluster.Open(dir); errors.Is(oerr, cluster.ErrNoSpec) {
				res.MemberCheck = "not checked: no attached cluster in " + dir + " (`steward attach` it first)"
			} else if oerr != nil {
				return oerr
			} else if id, cerr := adopt.CheckAttached(cmd.Context(), c, run); cerr != nil {
				res.MemberCheck = "failed"
				if problem == nil {
					problem = cerr
					res.Problem = cerr.Error()
				}
			} else {
				res.MemberCheck, res.MemberID = "passed", fmt.Sprintf("%x", id)
			}
			diffs, derr := stewardDifferences(run)
			res.Differences = diffs
			if perr := g.Print(cmd.OutOrStdout(), res, func(tw *tabwriter.Writer) { table(tw, res) }); perr != nil {
				return perr
			}
			if problem != nil {
				return problem
			}
			return derr
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only discover and show; change nothing")
	cmd.Flags().StringVar(&manifest, "manifest", "", "the member's static pod manifest (kubeadm: "+adopt.KubeadmManifest+")")
	cmd.Flags().StringVar(&unit, "unit", "", "the member's systemd unit file")
	cmd.Flags().IntVar(&pid, "pid", 0, "the member's running etcd process")
	cmd.Flags().StringVar(&undo, "undo", "", "give the adopted member `NAME` back to how it ran before (a plan: stop it under the agent, the spec entry external again, its manifest moved back or its old process restarted)")
	return cmd
}

// apply shows the differences, then plans and runs the adoption of the
// member, and prints the plan.
func apply(cmd *cobra.Command, g *cli.Globals, run adopt.MemberRun) error {
	dir, err := g.StewardDir()
	if err != nil {
		return err
	}
	c, err := cluster.Open(dir)
	if errors.Is(err, cluster.ErrNoSpec) {
		return fmt.Errorf("no attached cluster in %s: `steward attach --continuous` it first, then adopt its members", dir)
	} else if err != nil {
		return err
	}
	c.Progress = cli.Progress(cmd.ErrOrStderr())
	diffs, err := stewardDifferences(run)
	if err != nil {
		return err
	}
	for _, d := range diffs {
		c.Progress.Say("difference: --%s now %s, under Steward %s", d.Flag, dash(d.Current), dash(d.Steward))
	}
	return runPlan(cmd, g, c, func() (*plan.Plan, error) {
		p, err := adopt.Apply(cmd.Context(), c, run)
		return p, adoptHint(err, run.Name)
	})
}

// adoptHint adds what to do about a refused adoption of member name: the
// command that gives an adopted one back, the flag that adds this
// machine's agent, the command that imports its version.
func adoptHint(err error, name string) error {
	err = cli.Advise(err, adopt.ErrAdopted, fmt.Sprintf("; `steward adopt --undo %s` gives it back", name))
	err = cli.Advise(err, adopt.ErrNoAgent, fmt.Sprintf(": attach with --continuous (it adds this machine's agent %q)", spec.LocalAgent))
	return cli.Advise(err, adopt.ErrNoBinary, "; import that version (`steward binaries import`) before adopting")
}

// runPlan starts this machine's agent (the adopted member runs under it),
// runs the plan made by run and prints the plan as it ended.
func runPlan(cmd *cobra.Command, g *cli.Globals, c *cluster.Cluster, run func() (*plan.Plan, error)) error {
	if err := cli.EnsureAgent(cmd.Context(), c); err != nil {
		return err
	}
	p, err := run()
	if p != nil {
		if latest, lerr := c.Plans().Get(p.ID); lerr == nil {
			p = latest
		}
		if perr := g.PrintPlan(cmd.OutOrStdout(), p); perr != nil && err == nil {
			err = perr
		}
	}
	return cli.PlanHint(err)
}

// undoAdoption plans and runs the undo of a member's adoption.
func undoAdoption(cmd *cobra.Command, g *cli.Globals, name string) error {
	c, err := g.Cluster(cmd)
	if err != nil {
		return err
	}
	return runPlan(cmd, g, c, func() (*plan.Plan, error) { return adopt.Undo(cmd.Context(), c, name) })
}

// stewardDifferences compares the member with the flags the agent would
// start it with (pkg/agent's EtcdFlags, for the version it runs; Steward's
// embedded version when it could not be told).
func stewardDifferences(run adopt.MemberRun) ([]adopt.Difference, error) {
	cfg, err := run.MemberConfig()
	if err != nil {
		return nil, err
	}
	if cfg.Version == "" {
		cfg.Version = binaries.EmbeddedVersion()
	}
	flags, err := agent.EtcdFlags(cfg, catalogue.Default())
	if err != nil {
		return nil, fmt.Errorf("the flags Steward would run member %s with: %w", run.Name, err)
	}
	d := adopt.Differences(run, flags)
	if d == nil {
		d = []adopt.Difference{} // computed, none: [] in JSON
	}
	return d, nil
}

func table(tw *tabwriter.Writer, r Result) {
	m := r.Member
	row := func(k, v string) {
		if v == "" {
			v = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\n", k, v)
	}
	row("SOURCE", m.Source.String())
	row("MEMBER CHECK", r.MemberCheck+idSuffix(r.MemberID))
	row("NAME", m.Name)
	row("VERSION", m.Version)
	row("BINARY", m.Binary)
	row("DATA DIR", m.DataDir)
	row("WAL DIR", m.WALDir)
	row("CLIENT URLS", strings.Join(m.AdvertiseClientURLs, ",")+" (listen "+strings.Join(m.ListenClientURLs, ",")+")")
	row("PEER URLS", strings.Join(m.InitialAdvertisePeerURLs, ",")+" (listen "+strings.Join(m.ListenPeerURLs, ",")+")")
	row("INITIAL CLUSTER", m.InitialCluster)
	row("CLIENT TLS", tlsRow(m.ClientTLS))
	row("PEER TLS", tlsRow(m.PeerTLS))
	keys := make([]string, 0, len(m.Flags))
	for k := range m.Flags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		row("FLAG", "--"+k+"="+m.Flags[k])
	}
	for _, i := range m.Ignored {
		row("IGNORED BY ETCD", i)
	}
	if r.Problem != "" {
		row("PROBLEM", r.Problem)
	}
	if r.Differences == nil {
		return // not computed: the error says why
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "FLAG\tNOW\tSTEWARD")
	for _, d := range r.Differences {
		fmt.Fprintf(tw, "--%s\t%s\t%s\n", d.Flag, dash(d.Current), dash(d.Steward))
	}
}

func idSuffix(id string) string {
	if id == "" {
		return ""
	}
	return " (member " + id + ")"
}

func tlsRow(t adopt.TLS) string {
	if t.CertFile == "" {
		return "off"
	}
	return fmt.Sprintf("cert %s, key %s, CA %s, client certs required: %t", t.CertFile, t.KeyFile, dash(t.TrustedCAFile), t.ClientCertAuth)
}

func dash(s string) string {
	if s == "" {
		return "(not set)"
	}
	return s
}
