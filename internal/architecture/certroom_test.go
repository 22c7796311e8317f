package architecture

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The certificate room (docs/ARCHITECTURE.md): pkg/certs owns the
// certificate lifecycle and builds on the x509 tools pkg/pki exports for
// it alone (pkg/pki/tools.go: reading and writing pairs, signing,
// reissuing with one signer, replacing a leaf). Nothing else calls those
// tools: a package that needs a certificate renewed, rotated or taken over
// asks pkg/certs.
const (
	pkiTools = "pkg/pki/tools.go"
	room     = "pkg/certs"
)

// roomTools returns the exported functions and types of pkiTools.
func roomTools(t *testing.T, root string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, pkiTools), nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil && d.Name.IsExported() {
				out[d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.IsExported() {
					out[ts.Name.Name] = true
				}
			}
		}
	}
	return out
}

// toolUses returns, for the Go file at p, the pkg/pki tools it names
// ("pki.Sign" at line N), under whatever name it imports pkg/pki.
func toolUses(t *testing.T, p string, tools map[string]bool) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	local := ""
	for _, imp := range f.Imports {
		if path, _ := strconv.Unquote(imp.Path.Value); path == module+"/pkg/pki" {
			local = "pki"
			if imp.Name != nil {
				local = imp.Name.Name
			}
		}
	}
	if local == "" {
		return nil
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == local && tools[sel.Sel.Name] {
			out = append(out, "pki."+sel.Sel.Name+" at line "+strconv.Itoa(fset.Position(sel.Pos()).Line))
		}
		return true
	})
	return out
}

// TestRoomTools: no Go file outside pkg/pki and the certificate room
// (pkg/certs and below) uses pkg/pki's tools (pkiTools), tests included.
func TestRoomTools(t *testing.T) {
	root := filepath.Join("..", "..")
	tools := roomTools(t, root)
	if len(tools) == 0 {
		t.Fatalf("%s exports no tool: the rule checks nothing", pkiTools)
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "pkg/pki" || rel == room || strings.HasPrefix(rel, room+"/") || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		for _, u := range toolUses(t, p, tools) {
			t.Errorf("%s uses %s: only the certificate room (%s) uses pkg/pki's tools; call the lifecycle there", rel, u, room)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRoomToolsBite: the check finds a tool used under another import
// name, so a renamed import cannot slip past it.
func TestRoomToolsBite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.go")
	src := "package x\n\nimport certx \"" + module + "/pkg/pki\"\n\nvar _ = certx.Sign\n"
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := toolUses(t, p, map[string]bool{"Sign": true}); len(got) != 1 {
		t.Errorf("toolUses = %v, want the one use of Sign", got)
	}
}
