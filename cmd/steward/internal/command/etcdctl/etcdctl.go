// Package etcdctl is the `steward etcdctl` command: etcd's client CLI of
// the cluster's version, pointed at the cluster, with no setup (as kubectl
// needs none).
//
// The etcdctl run is the binary store's etcdctl of the spec's version, else
// (the store lacks it) the etcdctl linked into Steward (etcd's own ctlv3 of
// the embedded version). The endpoints and the client certificate go to
// etcdctl as ETCDCTL_* variables, never on its command line; a variable the
// user set, or a flag the user passes (--endpoints, --cacert, --cert, --key),
// wins: Steward does not set that one (etcdctl refuses a flag shadowing a
// variable). Every argument is passed through unchanged, and the exit code
// is etcdctl's: the store's etcdctl replaces this process (exec).
package etcdctl

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/etcdctl/v3/ctlv3"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/cluster"
)

// NewCommand returns the etcdctl command.
func NewCommand(g *cli.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "etcdctl [etcdctl arguments]",
		Short: "Run etcdctl of the cluster's version against the cluster (endpoints and client certificate filled in)",
		Long: `Run etcdctl of the cluster's version, from the binary store (else the etcdctl linked
into Steward, of the embedded version), with the cluster's endpoints and client
certificate given as ETCDCTL_ENDPOINTS, ETCDCTL_CACERT, ETCDCTL_CERT and ETCDCTL_KEY.
Every argument goes to etcdctl unchanged; the exit code is etcdctl's. An ETCDCTL_*
variable you set, or one of the flags --endpoints, --cacert, --cert, --key, is kept
and wins over Steward's. --dir (or $STEWARD_DIR) names the Steward directory, and is
the only flag Steward reads itself.`,
		Example: `  steward etcdctl put greeting hello
  steward etcdctl get greeting -w json
  steward etcdctl endpoint status -w table`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, rest, err := splitDir(args)
			if err != nil {
				return err
			}
			if dir != "" {
				g.Dir = dir
			}
			sdir, err := g.StewardDir()
			if err != nil {
				return err
			}
			c, err := cli.Open(sdir)
			if err != nil {
				return err
			}
			env := Env(c, os.Environ(), rest)
			path, err := binaries.Open(c.Spec.BinaryStoreDir(c.Dir)).Tool(c.Spec.Version, "etcdctl")
			switch {
			case err == nil:
				// The store's etcdctl replaces this process: its exit
				// code, signals and terminal are etcdctl's own.
				return syscall.Exec(path, append([]string{"etcdctl"}, rest...), env)
			case !errors.Is(err, binaries.ErrNotFound):
				return err
			}
			// The linked etcdctl, in this process: its variables set, its
			// arguments in os.Args (ctlv3 reads them there); it exits
			// with its own code.
			for _, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				if strings.HasPrefix(k, "ETCDCTL_") {
					if err := os.Setenv(k, v); err != nil {
						return err
					}
				}
			}
			os.Args = append([]string{"etcdctl"}, rest...)
			if err := ctlv3.Start(); err != nil {
				fmt.Fprintln(os.Stderr, "Error:", err)
				return &cli.ExitError{Code: 1}
			}
			return nil
		},
	}
}

// splitDir takes Steward's --dir (--dir X or --dir=X) out of the
// arguments; the rest go to etcdctl.
func splitDir(args []string) (dir string, rest []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--dir":
			if i+1 >= len(args) {
				return "", nil, errors.New("--dir needs the Steward directory: --dir DIR")
			}
			dir = args[i+1]
			i++
		case strings.HasPrefix(a, "--dir="):
			dir = strings.TrimPrefix(a, "--dir=")
		default:
			rest = append(rest, a)
		}
	}
	return dir, rest, nil
}

// Env is etcdctl's environment: environ (the user's) with the cluster's
// ETCDCTL_ENDPOINTS, ETCDCTL_CACERT, ETCDCTL_CERT and ETCDCTL_KEY added,
// each unless environ sets it or args pass its flag. Only file paths and
// URLs are added: no secret.
func Env(c *cluster.Cluster, environ, args []string) []string {
	out := slices.Clone(environ)
	for _, kv := range c.EtcdctlEnv() {
		k, _, _ := strings.Cut(kv, "=")
		if hasVar(environ, k) || hasFlag(args, flagOf(k)) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func hasVar(environ []string, k string) bool {
	for _, kv := range environ {
		if strings.HasPrefix(kv, k+"=") {
			return true
		}
	}
	return false
}

// flagOf is etcdctl's flag for one of its variables: ETCDCTL_CACERT is
// --cacert.
func flagOf(k string) string {
	return "--" + strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, "ETCDCTL_"), "_", "-"))
}

func hasFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}
