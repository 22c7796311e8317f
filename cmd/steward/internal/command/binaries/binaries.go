// Package binaries is the `steward binaries` command: list, import, verify
// the etcd versions in the binary store (see pkg/binaries), and push them
// to the hosts of a cluster (pkg/binpush.Push).
package binaries

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/binpush"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/hostset"
	"github.com/etcd-steward/steward/pkg/spec"
)

// StoreEnv is the environment variable naming the default binary store.
const StoreEnv = "STEWARD_BIN_STORE"

// NewCommand returns the binaries command.
func NewCommand(g *cli.Globals) *cobra.Command {
	var storeDir string
	cmd := &cobra.Command{
		Use:   "binaries",
		Short: "Manage the versioned etcd binary store",
		Long: `Manage the versioned etcd binary store: one directory per etcd version
(<store>/etcd-vX.Y.Z) holding etcd, etcdctl and etcdutl and a manifest of their
SHA-256 sums. The etcd server linked into steward (the embedded version) is
always available as well.`,
	}
	cmd.PersistentFlags().StringVar(&storeDir, "store", "",
		"binary store directory (default $"+StoreEnv+", else the cluster spec's binaryStore, else <steward dir>/binaries)")
	open := func() (*binaries.Store, error) { return openStore(g, storeDir) }
	cmd.AddCommand(newListCommand(g, open), newImportCommand(g, open, &storeDir), newVerifyCommand(g, open), newPushCommand(g, open, &storeDir))
	return cmd
}

// openStore returns the store named by --store, else $STEWARD_BIN_STORE,
// else the binaryStore of the Steward directory's cluster spec, else
// <steward dir>/binaries.
func openStore(g *cli.Globals, flag string) (*binaries.Store, error) {
	dir := flag
	if dir == "" {
		dir = os.Getenv(StoreEnv)
	}
	if dir == "" {
		sd, err := g.StewardDir()
		if err != nil {
			return nil, err
		}
		dir = filepath.Join(sd, "binaries")
		// The cluster's own store, when the directory holds a spec.
		if s, err := spec.Load(filepath.Join(sd, spec.FileName)); err == nil {
			dir = s.BinaryStoreDir(sd)
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("binary store %q: %w", dir, err)
	}
	return binaries.Open(abs), nil
}

// commandContext returns the command's context, or a background one.
func commandContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

func newListCommand(g *cli.Globals, open func() (*binaries.Store, error)) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the etcd versions available (store and embedded)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.CheckOutput(); err != nil {
				return err
			}
			s, err := open()
			if err != nil {
				return err
			}
			list, err := s.List()
			if err != nil {
				return err
			}
			return g.Print(cmd.OutOrStdout(), list, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "VERSION\tSOURCE\tTOOLS\tIMPORTED\tPATH")
				for _, b := range list {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n",
						b.Version, b.Source, strings.Join(b.Tools, ","), formatTime(b.ImportedAt), b.Path)
				}
			})
		},
	}
}

func newImportCommand(g *cli.Globals, open func() (*binaries.Store, error), storeFlag *string) *cobra.Command {
	var opt binaries.ImportOptions
	var noPush bool
	cmd := &cobra.Command{
		Use:   "import SRC",
		Short: "Import etcd binaries from a directory or a release tarball (and push them to the cluster's hosts)",
		Long: `Import etcd (and etcdctl and etcdutl when present) into the binary store.
SRC is a directory holding the binaries or an official release tarball
(etcd-vX.Y.Z-linux-amd64.tar.gz). The version comes from --version, else from
the name of SRC (etcd-vX.Y.Z... or vX.Y.Z), and must match what
"etcd --version" reports. Re-importing an identical binary is a no-op; a
different binary under a stored version needs --force, which keeps the old
directory as etcd-vX.Y.Z.replaced-<timestamp>.

On a coordinator (a Steward directory whose cluster.yaml has agents on other
hosts), the version is then pushed to every such host, as by
"steward binaries push VERSION"; --no-push skips that. When a host does not
take it, the command exits non-zero naming it; the local import stays.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.CheckOutput(); err != nil {
				return err
			}
			s, err := open()
			if err != nil {
				return err
			}
			ctx := commandContext(cmd)
			b, err := s.Import(ctx, args[0], opt)
			if err != nil {
				return importHint(err)
			}
			out := importResult{Binary: b}
			var perr error
			if !noPush {
				out.Push, perr = pushAfterImport(ctx, g, cmd, s, b.Version)
				if perr != nil {
					perr = fmt.Errorf("etcd %s is in the binary store %s, but: %w", b.Version, s.Dir, pushHint(perr, out.Push, b.Version, *storeFlag))
				}
			}
			if err := g.Print(cmd.OutOrStdout(), out, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "etcd %s is in the binary store %s\n", b.Version, s.Dir)
				fmt.Fprintf(tw, "path:\t%s\ntools:\t%s\nimported:\t%s\n",
					b.Path, strings.Join(b.Tools, ","), formatTime(b.ImportedAt))
				if out.Push != nil {
					for _, h := range out.Push.Hosts {
						fmt.Fprintf(tw, "host %s (%s):\t%s\n", h.Host, h.Address, h.Result)
					}
				}
			}); err != nil {
				return err
			}
			return perr
		},
	}
	f := cmd.Flags()
	f.StringVar(&opt.Version, "version", "", "etcd version being imported, e.g. 3.6.16 (default: from the name of SRC)")
	f.StringVar(&opt.SHA256, "sha256", "", "expected SHA-256 of the tarball, or of the etcd binary when SRC is a directory")
	f.BoolVar(&opt.Force, "force", false, "replace a different binary already stored under the version (the old one is kept aside)")
	f.BoolVar(&noPush, "no-push", false, "import into this machine's store only, not to the cluster's other hosts")
	return cmd
}

// importResult is what import prints: the stored version and, on a
// coordinator, what each host got.
type importResult struct {
	binaries.Binary
	Push *binpush.PushResult `json:"push,omitempty"`
}

// pushAfterImport pushes an imported version to the other hosts of the
// Steward directory's cluster; a directory without a spec (a host's) or a
// spec without other hosts pushes nothing (nil result).
func pushAfterImport(ctx context.Context, g *cli.Globals, cmd *cobra.Command, s *binaries.Store, version string) (*binpush.PushResult, error) {
	dir, err := g.StewardDir()
	if err != nil {
		return nil, err
	}
	c, err := cluster.Open(dir)
	if errors.Is(err, cluster.ErrNoSpec) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("it was pushed to no host: %w", err)
	}
	if len(hostset.Remote(c.Spec)) == 0 {
		return nil, nil
	}
	c.Progress = cli.Progress(cmd.ErrOrStderr())
	res, err := binpush.Push(ctx, pushTarget(c), version, binpush.Options{Store: s})
	advisePush(&res)
	return &res, err
}

func newPushCommand(g *cli.Globals, open func() (*binaries.Store, error), storeFlag *string) *cobra.Command {
	var opt binpush.Options
	cmd := &cobra.Command{
		Use:   "push VERSION [--host NAME]...",
		Short: "Push an etcd version from this machine's store to the cluster's other hosts",
		Long: `Send etcd VERSION from this machine's binary store to the agents on other
hosts in the cluster spec: every one, or those named with --host. Each agent
writes the files into a temporary directory of its own binary store, checks
each one against the SHA-256 of this store's manifest and etcd --version
against VERSION, and only then makes the version visible; a refused push
leaves the host's store as it was. A host that already holds a verified copy
of the same etcd receives nothing; one holding a different etcd under
VERSION (another build) refuses it unless --force is given: then the host's
copy is moved aside (etcd-vVERSION.replaced-TIME in its store) and this
machine's put in its place, so that every host runs the same build (what
` + "`steward status`" + ` reports as BinariesInStep). This machine's copy is
verified first.

Hosts are pushed to several at once, with a line each on stderr. The
command exits non-zero naming the hosts (and their addresses) the version
did not reach; the others keep it: run it again with --host for those.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			if opt.Store, err = open(); err != nil {
				return err
			}
			res, perr := binpush.Push(commandContext(cmd), pushTarget(c), args[0], opt)
			advisePush(&res)
			if len(res.Hosts) == 0 {
				return perr
			}
			if err := g.Print(cmd.OutOrStdout(), res, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "HOST\tADDRESS\tRESULT\tBINARY")
				for _, h := range res.Hosts {
					what := h.Binary
					if h.Result == binpush.PushFailed {
						what = "-"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", h.Host, h.Address, h.Result, what)
				}
			}); err != nil {
				return err
			}
			return pushHint(perr, &res, res.Version, *storeFlag)
		},
	}
	cmd.Flags().StringArrayVar(&opt.Hosts, "host", nil, "push to this host only (an agent name in the spec; repeatable; default: every other host)")
	cmd.Flags().DurationVar(&opt.Timeout, "timeout", 10*time.Minute, "how long each host's push may take")
	cmd.Flags().BoolVar(&opt.Replace, "force", false, "replace a different etcd (another build) a host stores under the version; its copy is kept aside")
	return cmd
}

// advisePush gives each host's error in res the advice main adds to
// errors (an unreachable agent: what to check), as JSON and the table
// show it.
func advisePush(res *binpush.PushResult) {
	for i, h := range res.Hosts {
		if h.Err != nil {
			res.Hosts[i].Error = cli.LibraryAdvice(h.Err).Error()
		}
	}
}

// pushTarget is what a push needs of the cluster c.
func pushTarget(c *cluster.Cluster) binpush.Cluster {
	return binpush.Cluster{Spec: c.Spec, Dir: c.Dir, SpecPath: c.SpecPath(), Agent: c.Agent, Progress: c.Progress}
}

// pushHint adds the command that pushes again to the hosts a push missed.
func pushHint(err error, res *binpush.PushResult, version, storeFlag string) error {
	if res == nil || !errors.Is(err, binpush.ErrPushIncomplete) {
		return err
	}
	again := "steward binaries push " + version
	if storeFlag != "" {
		again += " --store " + storeFlag
	}
	for _, h := range res.Failed() {
		again += " --host " + h
	}
	// The agents' refusals arrive as text: look for the different build.
	if strings.Contains(err.Error(), binaries.ErrDifferentBinary.Error()) {
		return cli.Hint(err, binpush.ErrPushIncomplete, "a host holding another build under the version takes this one with `"+again+" --force` (its copy is kept aside)")
	}
	return cli.Hint(err, binpush.ErrPushIncomplete, "once they answer, run `"+again+"`")
}

// importHint adds the flag that gets past a refused import.
func importHint(err error) error {
	err = cli.Hint(err, binaries.ErrUnknownVersion, "pass it with --version")
	return cli.Hint(err, binaries.ErrDifferentBinary, "use --force to replace it (the old directory is kept aside)")
}

func newVerifyCommand(g *cli.Globals, open func() (*binaries.Store, error)) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "verify [VERSION|--all]",
		Short: "Check stored binaries against their manifests and etcd --version",
		Long: `Recompute the SHA-256 of each stored file against its manifest and check that
"etcd --version" reports the stored version. Without VERSION (or with --all)
every version in the store is verified. Exits non-zero on any problem.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.CheckOutput(); err != nil {
				return err
			}
			if all && len(args) > 0 {
				return errors.New("give either a VERSION or --all, not both")
			}
			s, err := open()
			if err != nil {
				return err
			}
			var results []binaries.VerifyResult
			var verr error
			if len(args) == 1 {
				r, err := s.Verify(commandContext(cmd), args[0])
				if errors.Is(err, binaries.ErrNotFound) {
					return err
				}
				results, verr = []binaries.VerifyResult{r}, err
			} else {
				results, verr = s.VerifyAll(commandContext(cmd))
			}
			if results == nil && verr != nil {
				return verr
			}
			if err := g.Print(cmd.OutOrStdout(), results, func(tw *tabwriter.Writer) {
				if len(results) == 0 {
					fmt.Fprintf(tw, "no etcd versions in the binary store %s\n", s.Dir)
					return
				}
				fmt.Fprintln(tw, "VERSION\tOK\tPROBLEMS")
				for _, r := range results {
					fmt.Fprintf(tw, "%s\t%t\t%s\n", r.Version, r.OK, strings.Join(r.Problems, "; "))
				}
			}); err != nil {
				return err
			}
			return verr
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "verify every version in the store")
	return cmd
}

// formatTime renders an import time for tables, "-" when unknown.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
