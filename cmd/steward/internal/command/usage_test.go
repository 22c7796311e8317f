package command

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestFlagPlaceholders: help renders a flag's placeholder from the first
// back-quoted word of its usage (pflag's UnquoteUsage), else from its
// type: a back-quoted command in a usage becomes the placeholder
// ("--from-snapshot etcdctl snapshot save", "--watch steward up"). Every
// placeholder is one word, a boolean flag has none, and none is a bare
// lower-case type a user cannot read as what to write ("--to-time time").
func TestFlagPlaceholders(t *testing.T) {
	var walk func(c *cobra.Command)
	check := func(c *cobra.Command, f *pflag.Flag) {
		name, _ := pflag.UnquoteUsage(f)
		switch {
		case strings.ContainsAny(name, " \t"):
			t.Errorf("%s --%s: placeholder %q is several words (a back-quoted phrase in its usage)", c.CommandPath(), f.Name, name)
		case f.Value.Type() == "bool" && name != "":
			t.Errorf("%s --%s: a boolean flag shows placeholder %q (a back-quoted word in its usage)", c.CommandPath(), f.Name, name)
		case name == "time":
			t.Errorf("%s --%s: placeholder %q; name what to write in its usage (`TIME`)", c.CommandPath(), f.Name, name)
		}
	}
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) { check(c, f) })
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewRootCommand())
}
