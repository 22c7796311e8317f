// Package binaries is the `steward binaries` command: list, import and
// verify the etcd versions in the binary store (see pkg/binaries).
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
	cmd.AddCommand(newListCommand(g, open), newImportCommand(g, open), newVerifyCommand(g, open))
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

func newImportCommand(g *cli.Globals, open func() (*binaries.Store, error)) *cobra.Command {
	var opt binaries.ImportOptions
	cmd := &cobra.Command{
		Use:   "import SRC",
		Short: "Import etcd binaries from a directory or a release tarball",
		Long: `Import etcd (and etcdctl and etcdutl when present) into the binary store.
SRC is a directory holding the binaries or an official release tarball
(etcd-vX.Y.Z-linux-amd64.tar.gz). The version comes from --version, else from
the name of SRC (etcd-vX.Y.Z... or vX.Y.Z), and must match what
"etcd --version" reports. Re-importing an identical binary is a no-op; a
different binary under a stored version needs --force, which keeps the old
directory as etcd-vX.Y.Z.replaced-<timestamp>.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.CheckOutput(); err != nil {
				return err
			}
			s, err := open()
			if err != nil {
				return err
			}
			b, err := s.Import(commandContext(cmd), args[0], opt)
			if err != nil {
				return importHint(err)
			}
			return g.Print(cmd.OutOrStdout(), b, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "etcd %s is in the binary store %s\n", b.Version, s.Dir)
				fmt.Fprintf(tw, "path:\t%s\ntools:\t%s\nimported:\t%s\n",
					b.Path, strings.Join(b.Tools, ","), formatTime(b.ImportedAt))
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&opt.Version, "version", "", "etcd version being imported, e.g. 3.6.16 (default: from the name of SRC)")
	f.StringVar(&opt.SHA256, "sha256", "", "expected SHA-256 of the tarball, or of the etcd binary when SRC is a directory")
	f.BoolVar(&opt.Force, "force", false, "replace a different binary already stored under the version (the old one is kept aside)")
	return cmd
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
