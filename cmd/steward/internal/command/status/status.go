// Package status is the `steward status` command.
package status

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/status"
)

// NewCommand returns the status command.
func NewCommand(g *cli.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the cluster, its members and its conditions",
		Long: `Show the cluster (ID, versions, leader, quorum), every member (role, health,
database size, revision, raft term and index, alarms, process state, last error) and
the conditions (Ready, AllMembersReady, BackupReady, UpgradeInProgress,
AdoptionInProgress, CertificateRotationInProgress, KubeUpgradeInProgress (each for its own plan kinds),
CertificatesReady and, where Steward renews the certificates, CertificateRenewal:
whether the renewal loop runs; with agents on other hosts, BinariesInStep: whether
each host's binary store holds the spec's version and every version of this
machine's store, the same build, with a line per host that differs). -o json and -o yaml field names are stable;
docs/cli.md lists them. The command succeeds whenever it could
report; read the conditions to decide whether the cluster is well. A stopped
cluster (this machine's agent not running and no member answering) is reported
in one line naming ` + "`steward up`" + ` and exits 1, as etcdctl endpoint health does when
no endpoint is healthy (-o json and -o yaml still print the status, with
cluster.stopped true).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			if c.Stopped(cmd.Context()) {
				return stopped(g, cmd, c)
			}
			st, err := status.Get(cmd.Context(), c)
			if err != nil {
				return err
			}
			cli.ConditionAdvice(st)
			// The one write of a status report: the conditions' transition
			// times and the cluster ID seen. Failing it leaves the report
			// true (only lastTransitionTime may be off), so it warns.
			if err := status.Record(c, st, time.Now()); err != nil {
				c.Progress.Say("warning: %v", err)
			}
			return g.Print(cmd.OutOrStdout(), st, func(tw *tabwriter.Writer) { table(tw, st) })
		},
	}
}

// stopped reports a stopped cluster: one line in the table form, the
// status (cluster.stopped true) in JSON and YAML with the line on stderr;
// exit code 1 either way.
func stopped(g *cli.Globals, cmd *cobra.Command, c *cluster.Cluster) error {
	line := cli.UpHint(c.StoppedError(""), c.Dir)
	if g.Output == "table" {
		fmt.Fprintln(cmd.OutOrStdout(), line)
		return &cli.ExitError{Code: 1}
	}
	if err := g.Print(cmd.OutOrStdout(), status.Stopped(c, time.Now()), nil); err != nil {
		return err
	}
	return &cli.ExitError{Code: 1, Err: line}
}

func table(tw *tabwriter.Writer, st *status.Status) {
	cs := st.Cluster
	tl := fmt.Sprint(cs.Timeline)
	if cs.ParentTimeline != 0 {
		tl += fmt.Sprintf(" (from %d at revision %d)", cs.ParentTimeline, cs.BranchRevision)
	}
	fmt.Fprintf(tw, "CLUSTER\tID\tVERSION\tSTORAGE\tLEADER\tQUORATE\tTIMELINE\tMEMBERS\n")
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%s\t%d voting, %d learners, %d healthy\n\n",
		cs.Name, dash(cs.ID), dash(cs.Version), dash(cs.StorageVersion), dash(cs.Leader), cs.Quorate, tl,
		cs.VotingMembers, cs.Learners, cs.HealthyMembers)
	fmt.Fprintf(tw, "NAME\tID\tROLE\tHEALTHY\tVERSION\tPROCESS\tDB SIZE\tIN USE\tREVISION\tTERM\tAPPLIED\tALARMS\tCLIENT URL\tLAST ERROR\n")
	for _, m := range st.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n",
			m.Name, dash(m.ID), m.Role, m.Healthy, dash(m.Version), m.Process,
			size(m.DBSize), size(m.DBSizeInUse), m.Revision, m.RaftTerm, m.RaftAppliedIndex,
			dash(strings.Join(m.Alarms, ",")), strings.Join(m.ClientURLs, ","), dash(m.LastError))
	}
	// Hosts, when the cluster has any on other machines: which answer.
	remote := false
	for _, a := range st.Agents {
		remote = remote || a.Host != ""
	}
	if remote {
		fmt.Fprintf(tw, "\nHOST\tADDRESS\tAGENT\tREACHABLE\tERROR\n")
		for _, a := range st.Agents {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\n", a.Name, dash(a.Host), a.Endpoint, a.Reachable, dash(a.Error))
		}
		// A line per host whose binary store is not in step with this one.
		header := false
		for _, a := range st.Agents {
			if a.Binaries == nil || a.Binaries.State == cluster.BinariesInStep {
				continue
			}
			if !header {
				fmt.Fprintf(tw, "\nHOST\tBINARIES\tDIFFERENCE\n")
				header = true
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", a.Name, a.Binaries.State, a.Binaries.Summary())
		}
	}
	fmt.Fprintf(tw, "\nCONDITION\tSTATUS\tREASON\tSINCE\tMESSAGE\n")
	for _, c := range st.Conditions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, c.LastTransitionTime.Format(time.RFC3339), c.Message)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// size is a member's database size in the table: IEC units (cli.Bytes),
// "-" when the member did not say.
func size(n int64) string {
	if n == 0 {
		return "-"
	}
	return cli.Bytes(n)
}
