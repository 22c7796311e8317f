package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImagesAdvice: the command's refusals name what to run, and leave
// no images directory behind.
func TestImagesAdvice(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "images")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "xml"}, `unknown output format "xml": use -o table, json or yaml`},
		{[]string{"--kube-version", "v1.35.4,v1.36.3"}, `build them with: make kube-binaries KUBE_VERSIONS="v1.35.4 v1.36.3"`},
	} {
		cmd := newImagesCommand()
		var buf bytes.Buffer
		cmd.SetOut(&buf)
		cmd.SetErr(&buf)
		cmd.SetArgs(append([]string{"--source", dir, "--out", out}, tc.args...))
		err := cmd.ExecuteContext(t.Context())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%v: %s was created", tc.args, out)
		}
	}
}
