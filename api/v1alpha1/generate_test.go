package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedFilesUpToDate runs controller-gen (pinned in
// hack/tools/go.mod, built into a temporary directory) as `make generate`
// does, writing into temporary directories, and fails when the checked-in
// deep copies or CRD differ from what it makes: a change to types.go
// without `make generate` fails here rather than in a cluster.
func TestGeneratedFilesUpToDate(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	cg := filepath.Join(tmp, "controller-gen")
	build := exec.CommandContext(t.Context(), "go", "build", "-modfile=hack/tools/go.mod", "-o", cg,
		"sigs.k8s.io/controller-tools/cmd/controller-gen")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building controller-gen: %v\n%s", err, out)
	}
	objDir, crdDir := filepath.Join(tmp, "object"), filepath.Join(tmp, "crd")
	// The Makefile's two controller-gen lines, with their output moved to
	// the temporary directories.
	for _, args := range [][]string{
		{"object:headerFile=/dev/null", "paths=./api/...", "output:object:dir=" + objDir},
		{"crd:crdVersions=v1", "paths=./api/...", "output:crd:dir=" + crdDir},
	} {
		gen := exec.CommandContext(t.Context(), cg, args...)
		gen.Dir = root
		if out, err := gen.CombinedOutput(); err != nil {
			t.Fatalf("controller-gen %v: %v\n%s", args, err, out)
		}
	}
	compareDir(t, objDir, filepath.Join(root, "api", "v1alpha1"), "zz_generated.*")
	compareDir(t, crdDir, filepath.Join(root, "deploy", "operator", "crd"), "*.yaml")
}

// compareDir fails unless the files matching pattern in checkedIn are
// exactly those controller-gen wrote to generated, byte for byte.
func compareDir(t *testing.T, generated, checkedIn, pattern string) {
	t.Helper()
	want, err := filepath.Glob(filepath.Join(generated, pattern))
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 {
		t.Fatalf("controller-gen wrote no %s into %s", pattern, generated)
	}
	have, err := filepath.Glob(filepath.Join(checkedIn, pattern))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, p := range have {
		names[filepath.Base(p)] = true
	}
	for _, p := range want {
		name := filepath.Base(p)
		delete(names, name)
		g, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		c, err := os.ReadFile(filepath.Join(checkedIn, name))
		if err != nil {
			t.Errorf("%s: %v: run `make generate` and commit the result", name, err)
			continue
		}
		if !bytes.Equal(g, c) {
			t.Errorf("%s differs from what controller-gen makes of the types: run `make generate` and commit the result", filepath.Join(checkedIn, name))
		}
	}
	for name := range names {
		t.Errorf("%s is not made by controller-gen from the types: remove it, or run `make generate`", filepath.Join(checkedIn, name))
	}
}
