package agent

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	agentpkg "github.com/etcd-steward/steward/pkg/agent"
)

// newPrepareVolumeCommand is `steward agent prepare-volume`: the init
// container of a member pod (and of the operator's pod), run as root with
// CAP_CHOWN alone, before Steward runs as a non-root user
// (pkg/agent/podvolume.go; docs/operator.md, Security).
func newPrepareVolumeCommand() *cobra.Command {
	var owner string
	var copies []string
	cmd := &cobra.Command{
		Use:   "prepare-volume [DIR...]",
		Short: "Make a pod's volumes the user Steward runs as (a pod's init container)",
		Long: `Make each DIR (a pod's volume) and what it holds owned by --owner, and copy each
--copy SRC=DST file to DST (mode 0600, owned by --owner), so that the pod's next
container can run Steward as that user, not as root.

What the user owns already is left as it is; what root (or another user) owns is
made the user's, the contents of a directory before the directory itself, so a
run that was interrupted is finished by the next one. Modes are not changed.
It needs CAP_CHOWN, and nothing else: the operator runs it as the init
container of every member pod and of its own pod.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, dirs []string) error {
			if owner == "" {
				return errors.New("--owner is required: give the user and group Steward runs as, e.g. --owner 65532:65532")
			}
			o, err := agentpkg.ParseOwner(owner)
			if err != nil {
				return cli.Advise(err, agentpkg.ErrBadOwner, "; give --owner UID:GID of the user the pod's Steward container runs as")
			}
			if len(dirs) == 0 && len(copies) == 0 {
				return errors.New("nothing to prepare: give the volume directories (DIR...) and/or --copy SRC=DST")
			}
			type pair struct{ src, dst string }
			var pairs []pair
			for _, c := range copies {
				src, dst, ok := strings.Cut(c, "=")
				if !ok || !strings.HasPrefix(src, "/") || !strings.HasPrefix(dst, "/") {
					return fmt.Errorf("--copy %q: give --copy SRC=DST, two absolute paths", c)
				}
				pairs = append(pairs, pair{src, dst})
			}
			out := cmd.OutOrStdout()
			for _, d := range dirs {
				n, err := agentpkg.TakeVolume(d, o)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "%s: owned by %s (%d entries changed)\n", d, o, n)
			}
			for _, p := range pairs {
				if err := agentpkg.CopyPrivate(p.src, p.dst, o); err != nil {
					return err
				}
				fmt.Fprintf(out, "copied %s to %s (0600, owned by %s)\n", p.src, p.dst, o)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&owner, "owner", "", "the user and group `UID:GID` Steward runs as in the pod (not root)")
	cmd.Flags().StringArrayVar(&copies, "copy", nil, "copy the file SRC to DST, 0600 and owned by --owner (`SRC=DST`; repeatable)")
	return cmd
}
