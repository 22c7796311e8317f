package backup

import (
	"errors"
	"fmt"
	"io/fs"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/backup"
)

// keygenResult is what `steward backup keygen` prints; its JSON field
// names are stable.
type keygenResult struct {
	File  string `json:"file"`
	KeyID string `json:"keyID"`
}

func keygenCommand(g *cli.Globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "keygen --out FILE",
		Short: "Write a new random backup encryption key to FILE (mode 0600; never overwrites)",
		Long: `Write a new random 256-bit backup encryption key (64 hex digits) to FILE with
mode 0600, for backup.encryptionKeyFile or --key-file. An existing FILE is
refused, never overwritten: the backups encrypted with a key are unreadable
without it. Keep a copy of the key away from the backups.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.CheckOutput(); err != nil {
				return err
			}
			if out == "" {
				return errors.New("--out: name the file to write the key to")
			}
			k, err := backup.GenerateKeyFile(out)
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("--out %s: the file already exists; keygen never overwrites a key (the backups encrypted with it would be lost): name a new file", out)
			}
			if err != nil {
				return err
			}
			r := keygenResult{File: out, KeyID: k.ID()}
			return g.Print(cmd.OutOrStdout(), r, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "FILE\tKEY ID")
				fmt.Fprintf(tw, "%s\t%s\n", r.File, r.KeyID)
			})
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write the key to (must not exist)")
	return cmd
}
