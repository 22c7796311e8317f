package architecture

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var fuzzFunc = regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)

// TestFuzzTargetsListed: every fuzz target of the module's packages is in
// hack/fuzz-targets, which `make fuzz` fuzzes one by one (a target left
// out still runs its seed corpus in `make test`, but is never fuzzed), and
// every listed target exists.
func TestFuzzTargetsListed(t *testing.T) {
	root := filepath.Join("..", "..")
	listed := map[string]bool{}
	f, err := os.Open(filepath.Join(root, "hack", "fuzz-targets"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		listed[filepath.Clean(fields[0])+" "+fields[1]] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, top := range []string{"api", "cmd", "internal", "pkg", "hack"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			for _, m := range fuzzFunc.FindAllStringSubmatch(string(b), -1) {
				found[rel+" "+m[1]] = true
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	for k := range found {
		if !listed[k] {
			t.Errorf("fuzz target %s is not in hack/fuzz-targets: add the line `./%s`", k, k)
		}
	}
	for k := range listed {
		if !found[k] {
			t.Errorf("hack/fuzz-targets lists %s, which no test file defines", k)
		}
	}
}
