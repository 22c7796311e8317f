package kubeupgrade

import (
	"strings"
	"testing"
)

// FuzzImageTagAndFlags: a static pod's image reference and command line
// as the API server reports them. Never panics; a tag holds no "/" and no
// "@"; every flag read was on the command line.
func FuzzImageTagAndFlags(f *testing.F) {
	f.Add("registry.k8s.io/kube-apiserver:v1.36.3", "kube-apiserver\x00--secure-port=6443\x00--x\x00y")
	f.Add("localhost:5000/a@sha256:00", "--\x00--=\x00-")
	f.Fuzz(func(t *testing.T, image, cmdline string) {
		tag := ImageTag(image)
		if strings.ContainsAny(tag, "/@") {
			t.Fatalf("ImageTag(%q) = %q", image, tag)
		}
		args := strings.Split(cmdline, "\x00")
		for name := range Flags(args) {
			if !strings.Contains(cmdline, "--"+name) {
				t.Fatalf("flag %q not on %q", name, args)
			}
		}
	})
}
