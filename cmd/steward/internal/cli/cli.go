// Package cli holds what every Steward command shares: the global flags, the
// Steward directory, and output in table, JSON or YAML form.
package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/etcd-steward/steward/internal/dirmode"
)

// Globals are the flags every command accepts.
type Globals struct {
	// Dir is the Steward directory (--dir, else $STEWARD_DIR, else ./steward-data).
	Dir string
	// Output is the output format: table, json or yaml.
	Output string
}

// AddFlags registers the global flags on the root command.
func (g *Globals) AddFlags(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&g.Dir, "dir", "", "Steward directory (default $STEWARD_DIR, else ./steward-data)")
	cmd.PersistentFlags().StringVarP(&g.Output, "output", "o", "table", "output format: table, json or yaml")
}

// StewardDir returns the absolute Steward directory.
func (g *Globals) StewardDir() (string, error) {
	d := g.Dir
	if d == "" {
		d = os.Getenv("STEWARD_DIR")
	}
	if d == "" {
		d = "steward-data"
	}
	abs, err := filepath.Abs(d)
	if err != nil {
		return "", fmt.Errorf("steward dir %q: %w", d, err)
	}
	// Every command checks the directory before it reads or writes in it:
	// another user's, or one others can rename, is refused; one of ours
	// that others may write is made private.
	tightened, err := dirmode.Secure(abs)
	for _, p := range tightened {
		fmt.Fprintf(os.Stderr, "made %s private (0700)\n", p)
	}
	if err != nil {
		return "", err
	}
	return abs, nil
}

// CheckOutput validates the -o flag.
func (g *Globals) CheckOutput() error {
	switch g.Output {
	case "table", "json", "yaml":
		return nil
	}
	return fmt.Errorf("unknown output format %q: use -o table, -o json or -o yaml", g.Output)
}

// Print writes v as JSON or YAML, or calls table for the table form.
func (g *Globals) Print(w io.Writer, v any, table func(tw *tabwriter.Writer)) error {
	switch g.Output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "table", "":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		table(tw)
		return tw.Flush()
	}
	return g.CheckOutput()
}

// Hint adds advice about a command's flags to a refusal of the library:
// when errors.Is(err, kind), the result reads "ERR; HINT" and still wraps
// err. Libraries say what was refused and why; only the command knows its
// flags.
func Hint(err, kind error, hint string) error {
	if err != nil && errors.Is(err, kind) {
		return fmt.Errorf("%w; %s", err, hint)
	}
	return err
}

// StartCPUProfile starts a Go CPU profile written to path (mode 0600)
// until stop is called.
func StartCPUProfile(path string) (stop func(), err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
