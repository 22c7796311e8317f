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

// FuzzRewrite: a static pod manifest as a host's agent returns it.
// Never panics; a manifest accepted comes back naming the target image,
// and rewriting the result again changes nothing.
func FuzzRewrite(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\nspec:\n  containers:\n  - name: kube-apiserver\n    image: registry.k8s.io/kube-apiserver:v1.35.4\n    command: [kube-apiserver, --secure-port=6443]\n"))
	f.Add([]byte("spec:\n  containers: []\n"))
	f.Add([]byte("{}"))
	pc := PlannedComponent{Component: "kube-apiserver", ToVersion: "v1.36.3", ToImage: "registry.k8s.io/kube-apiserver:v1.36.3"}
	f.Fuzz(func(t *testing.T, manifest []byte) {
		out, err := Rewrite(manifest, pc)
		if err != nil {
			return
		}
		if !strings.Contains(string(out), pc.ToImage) {
			t.Fatalf("rewritten manifest names no %s:\n%s", pc.ToImage, out)
		}
		again, err := Rewrite(out, pc)
		if err != nil || string(again) != string(out) {
			t.Fatalf("rewriting again: %v\n%s\nthen\n%s", err, out, again)
		}
	})
}

// FuzzKeptManifest: a manifest kept before an upgrade as a host's agent
// returns it to kube rollback, and the switching step's removal of
// --emulated-version. Never panics; a kept manifest accepted is carried
// byte for byte with a version that is its image's tag; a manifest
// without the flag comes back with none, and removing it again changes
// nothing.
func FuzzKeptManifest(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\nspec:\n  containers:\n  - name: kube-apiserver\n    image: registry.k8s.io/kube-apiserver:v1.35.4\n    command: [kube-apiserver, --secure-port=6443, --emulated-version=1.35]\n"))
	f.Add([]byte("spec:\n  containers:\n  - name: x\n    args: [--emulated-version, \"1.35\"]\n"))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, manifest []byte) {
		if rc, err := restoredFrom("node-a", "kube-apiserver", manifest); err == nil {
			if string(rc.Kept) != string(manifest) || rc.ToVersion != ImageTag(rc.ToImage) {
				t.Fatalf("kept %q: %+v", manifest, rc)
			}
		}
		out, err := WithoutFlag(manifest, "kube-apiserver", "emulated-version")
		if err != nil {
			return
		}
		if rc, err := restoredFrom("node-a", "kube-apiserver", out); err != nil || rc.ToEmulated != "" {
			t.Fatalf("without the flag: %+v, %v\n%s", rc, err, out)
		}
		again, err := WithoutFlag(out, "kube-apiserver", "emulated-version")
		if err != nil || string(again) != string(out) {
			t.Fatalf("removing again: %v\n%s\nthen\n%s", err, out, again)
		}
	})
}
