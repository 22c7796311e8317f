package command

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestRootHooksOnly: the root command's persistent hooks (the hidden
// --cpu-profile's start and stop) run for every command only while no
// subcommand sets persistent hooks of its own: cobra runs the nearest
// command's hook and skips its parents'.
func TestRootHooksOnly(t *testing.T) {
	root := NewRootCommand()
	if root.PersistentPreRunE == nil || root.PersistentPostRun == nil {
		t.Fatal("the root command has no persistent hooks: --cpu-profile would do nothing")
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.PersistentPreRun != nil || sub.PersistentPreRunE != nil || sub.PersistentPostRun != nil || sub.PersistentPostRunE != nil {
				t.Errorf("%q sets persistent hooks: the root's (--cpu-profile) would not run for it or below it; use PreRunE, or call the root's", sub.CommandPath())
			}
			walk(sub)
		}
	}
	walk(root)
}

// TestOutputFlagHint: --json (as kubectl and etcdctl users type it) is
// refused naming -o json; before, cobra's "unknown flag: --json" alone.
func TestOutputFlagHint(t *testing.T) {
	for _, args := range [][]string{{"status", "--json"}, {"backup", "list", "--yaml"}} {
		root := NewRootCommand()
		root.SetArgs(args)
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		err := root.Execute()
		want := "-o " + strings.TrimPrefix(args[len(args)-1], "--")
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "unknown flag") {
			t.Errorf("steward %s: %v, want the hint %q", strings.Join(args, " "), err, want)
		}
	}
	if err := outputFlagHint(errors.New("unknown flag: --jsonx")); err.Error() != "unknown flag: --jsonx" {
		t.Errorf("another flag got the hint: %v", err)
	}
}
