package cli

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
)

// PlanHint adds what the operator does next to the error of a plan whose step
// failed (a *plan.StepError in err's chain), and to the refusal of a new
// plan while another is active (a *plan.ActiveError: the commands that
// finish, stop or undo that one); other errors pass unchanged.
func PlanHint(err error) error {
	if err == nil {
		return nil
	}
	// The advice about the step's own error (LibraryAdvice) comes first.
	err = LibraryAdvice(err)
	if _, ok := errors.AsType[*plan.StepError](err); ok {
		return fmt.Errorf("%w; fix the cause, then run `steward plan resume` (or `steward plan abort`)", err)
	}
	if ae, ok := errors.AsType[*plan.ActiveError](err); ok {
		ways := ": `steward plan resume` finishes it"
		if ae.Abort {
			ways += ", `steward plan abort` stops it"
		}
		if ae.Undo {
			ways += ", `steward rollback` undoes it"
		}
		return fmt.Errorf("%w%s", err, ways)
	}
	return err
}

// PlanRefusalHint adds hint to a refusal of kind met before the plan was
// saved, when running the command again with other flags gets past it. A
// refusal inside a failed step (a *plan.StepError) gets none: the plan
// keeps the options it was made with, and PlanHint says what comes next.
func PlanRefusalHint(err, kind error, hint string) error {
	if _, ok := errors.AsType[*plan.StepError](err); ok {
		return err
	}
	return Hint(err, kind, hint)
}

// PrintPlan writes a plan as a table of steps, or as JSON or YAML. The
// table's first line is the summary its kind gives, JSON and YAML the
// record as its kind shows it (cluster.PlanKinds: Show, View); a plan of a
// kind no package registered is an error.
func (g *Globals) PrintPlan(w io.Writer, p *plan.Plan) error {
	summary, err := cluster.PlanKinds.Show(p)
	if err != nil {
		return err
	}
	view, err := cluster.PlanKinds.View(p)
	if err != nil {
		return err
	}
	if g.Output == "table" || g.Output == "" {
		fmt.Fprintf(w, "plan %s: %s\n", p.ID, summary)
		if p.Error != "" {
			fmt.Fprintf(w, "error: %s\n", p.Error)
		}
	}
	return g.Print(w, view, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "STEP\tSTATE\tKIND\tMEMBER\tVERSION\tSTARTED\tENDED\tDESCRIPTION\tERROR")
		for _, s := range p.Steps {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Number(), s.State, s.Kind, dash(s.Member), s.Version,
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
