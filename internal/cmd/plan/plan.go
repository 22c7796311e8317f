// Package plan is the `steward plan` command: show, resume and abort the
// latest upgrade or rollback plan.
package plan

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/upgrade"
)

// NewCommand returns the plan command.
func NewCommand(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "plan", Short: "Show, resume or abort the latest upgrade or rollback plan"}
	show := &cobra.Command{
		Use:   "show",
		Short: "List the latest plan's steps with their state, member, times and error",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			p, err := c.Plans().Latest()
			if err != nil {
				return err
			}
			return Print(g, cmd.OutOrStdout(), p)
		},
	}
	resume := &cobra.Command{
		Use:   "resume",
		Short: "Continue the latest plan from its first step that is not done",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			_, err = upgrade.Resume(cmd.Context(), c)
			return Hint(err)
		},
	}
	abort := &cobra.Command{
		Use:   "abort",
		Short: "Stop the latest plan after the step in progress (at once when nothing runs it)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			p, err := upgrade.Abort(c)
			if err != nil {
				return err
			}
			if p.State == plan.Aborted {
				fmt.Fprintf(cmd.ErrOrStderr(), "plan %s aborted\n", p.ID)
			} else {
				fmt.Fprintf(cmd.ErrOrStderr(), "plan %s stops after its current step\n", p.ID)
			}
			return nil
		},
	}
	cmd.AddCommand(show, resume, abort)
	return cmd
}

// Hint adds what the operator does next to the error of a plan whose step
// failed (a *plan.StepError in err's chain); other errors pass unchanged.
func Hint(err error) error {
	var stepErr *plan.StepError
	if !errors.As(err, &stepErr) {
		return err
	}
	return fmt.Errorf("%w; fix the cause, then run `steward plan resume` (or `steward plan abort`)", err)
}

// Print writes a plan as a table of steps, or as JSON or YAML.
func Print(g *cli.Globals, w io.Writer, p *plan.Plan) error {
	if g.Output == "table" || g.Output == "" {
		fmt.Fprintf(w, "plan %s: %s %s -> %s, strategy %s, %s\n", p.ID, p.Kind, p.From, p.To, p.Strategy, p.State)
		if p.Error != "" {
			fmt.Fprintf(w, "error: %s\n", p.Error)
		}
	}
	return g.Print(w, p, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "STEP\tSTATE\tKIND\tMEMBER\tVERSION\tSTARTED\tENDED\tDESCRIPTION\tERROR")
		for _, s := range p.Steps {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Index, s.State, s.Kind, dash(s.Member), s.Version,
				clock(s.StartedAt), clock(s.EndedAt), s.Description, dash(s.Error))
		}
	})
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clock(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format("15:04:05")
}
