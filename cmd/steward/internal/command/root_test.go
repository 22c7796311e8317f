package command

import (
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
