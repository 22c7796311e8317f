package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/etcd-steward/steward/pkg/bootstrap"
	"github.com/etcd-steward/steward/pkg/cluster"
)

// Cluster checks the -o flag and opens the cluster of the Steward
// directory, with progress lines going to the command's stderr.
func (g *Globals) Cluster(cmd interface{ ErrOrStderr() io.Writer }) (*cluster.Cluster, error) {
	if err := g.CheckOutput(); err != nil {
		return nil, err
	}
	dir, err := g.StewardDir()
	if err != nil {
		return nil, err
	}
	c, err := Open(dir)
	if err != nil {
		return nil, err
	}
	c.Progress = Progress(cmd.ErrOrStderr())
	return c, nil
}

// Open opens the cluster of the Steward directory dir; a directory with no
// spec gets the advice to run `steward up` on it first.
func Open(dir string) (*cluster.Cluster, error) {
	c, err := cluster.Open(dir)
	return c, NoSpecHint(err, dir)
}

// NoSpecHint adds to cluster.ErrNoSpec the command that writes the spec of
// the Steward directory dir.
func NoSpecHint(err error, dir string) error {
	return Hint(err, cluster.ErrNoSpec, fmt.Sprintf("run `steward up --dir %s` first", dir))
}

// Command is what the cluster's openers need of a command (a
// *cobra.Command): where to warn, its context, its name for refusals.
type Command interface {
	ErrOrStderr() io.Writer
	Context() context.Context
	CommandPath() string
}

// ClusterWithAgent is Cluster for commands that work on member processes:
// it also starts this machine's agent when the spec has one and it is not
// running while members still run (the agent was killed). A stopped
// cluster (cluster.ErrStopped: after `steward down` or a reboot) is
// refused instead, naming `steward up`: the agent starts the members it
// last ran, so starting it would start the whole cluster as a side effect
// of, say, `member add`. An attached cluster, whose members Steward does
// not run, is refused (ProcessControl).
func (g *Globals) ClusterWithAgent(cmd Command) (*cluster.Cluster, error) {
	c, err := g.controlled(cmd)
	if err != nil {
		return nil, err
	}
	if err := UpHint(c.RequireRunning(cmd.Context(), "run `"+cmd.CommandPath()+"`"), c.Dir); err != nil {
		return nil, err
	}
	return c, EnsureAgent(cmd.Context(), c)
}

// ClusterStartingAgent is ClusterWithAgent for the commands whose purpose
// is to bring members back, so a stopped cluster is theirs to start:
// `steward recover` (a reboot after quorum loss) and `steward plan
// resume` (a plan cut by a power loss).
func (g *Globals) ClusterStartingAgent(cmd Command) (*cluster.Cluster, error) {
	c, err := g.controlled(cmd)
	if err != nil {
		return nil, err
	}
	return c, EnsureAgent(cmd.Context(), c)
}

// controlled is Cluster for a command that acts on the members' processes:
// an attached cluster is refused (ProcessControl).
func (g *Globals) controlled(cmd Command) (*cluster.Cluster, error) {
	c, err := g.Cluster(cmd)
	if err != nil {
		return nil, err
	}
	if err := ProcessControl(c, cmd.CommandPath()); err != nil {
		return nil, err
	}
	return c, nil
}

// EnsureAgent starts this machine's agent unless it runs; when it cannot,
// the error says how to see why.
func EnsureAgent(ctx context.Context, c *cluster.Cluster) error {
	if _, err := bootstrap.EnsureLocalAgent(ctx, c, ""); err != nil {
		return fmt.Errorf("this machine's agent is not running and could not be started: %w (run it in the foreground with `steward agent --dir %s` to see why)", err, c.Dir)
	}
	return nil
}

// RunningCluster is Cluster for commands that talk to the running members
// (`backup now`, `defrag`, `leader move`): a stopped cluster is refused at
// once in one line naming `steward up`, instead of every member's
// connection error after its timeout. what says what the command does
// ("take a backup").
func (g *Globals) RunningCluster(cmd interface {
	ErrOrStderr() io.Writer
	Context() context.Context
}, what string) (*cluster.Cluster, error) {
	c, err := g.Cluster(cmd)
	if err != nil {
		return nil, err
	}
	if err := UpHint(c.RequireRunning(cmd.Context(), what), c.Dir); err != nil {
		return nil, err
	}
	return c, nil
}

// UpHint adds to cluster.ErrStopped the command that starts the cluster
// of the Steward directory dir.
func UpHint(err error, dir string) error {
	return Advise(err, cluster.ErrStopped, fmt.Sprintf("; start it with `steward up --dir %s`", dir))
}

// ProcessControl refuses the command (its path, "steward member add") on
// an attached cluster: it needs the member processes, which Steward does
// not run. The refusal points to `steward adopt`.
func ProcessControl(c *cluster.Cluster, command string) error {
	return AdoptHint(c.RequireProcessControl("run `" + command + "`"))
}

// OwnCerts refuses a command that issues or renews certificates from
// Steward's CA on a cluster whose certificates are the operator's.
func OwnCerts(c *cluster.Cluster, command string) error {
	return c.RequireOwnCerts("run `" + command + "`")
}

// AdoptHint adds to cluster.ErrExternal the command that hands an
// attached cluster's members to Steward.
func AdoptHint(err error) error {
	return Hint(err, cluster.ErrExternal, "`steward adopt` hands its members to Steward first (docs/attach.md)")
}
