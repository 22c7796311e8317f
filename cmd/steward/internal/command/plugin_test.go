package command

import (
	"bytes"
	"strings"
	"testing"
)

// Started as kubectl-steward (kubectl's plugin name), the arguments are
// those of `steward kubectl`; as steward, they are unchanged.
func TestNewCommandForPluginName(t *testing.T) {
	for _, tc := range []struct {
		argv0 string
		args  []string
		want  string
	}{
		{"/usr/local/bin/kubectl-steward", []string{"--help"}, "steward kubectl [command]"},
		{"kubectl-steward", []string{"status", "--help"}, "steward kubectl status NAME"},
		{"/usr/local/bin/steward", []string{"kubectl", "--help"}, "steward kubectl [command]"},
		{"/usr/local/bin/steward", []string{"--help"}, "steward [command]"},
	} {
		root := NewCommandFor(tc.argv0, tc.args)
		if !strings.HasPrefix(tc.argv0, "kubectl") && !strings.Contains(tc.argv0, "kubectl-") {
			root.SetArgs(tc.args)
		}
		var out bytes.Buffer
		root.SetOut(&out)
		if err := root.Execute(); err != nil {
			t.Fatalf("%s %v: %v", tc.argv0, tc.args, err)
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("%s %v: no %q in\n%s", tc.argv0, tc.args, tc.want, out.String())
		}
	}
}
