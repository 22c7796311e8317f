package architecture

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// commandNames are the top-level commands of the steward command tree
// (cmd/steward/internal/command: one package each; TestCommandNames
// keeps the list complete).
var commandNames = []string{"init", "up", "down", "env", "status", "member", "leader", "defrag", "alarm",
	"backup", "restore", "recover", "upgrade", "rollback", "plan", "inspect", "migrate", "agent", "host",
	"takeover", "binaries", "certs", "attach", "adopt", "etcd", "etcdctl", "kube", "operator", "kubectl"}

// stewardCommand is a steward command named in a string, quoted or not,
// as advice writes it ("run `steward plan resume`", `import it with
// "steward binaries import"`, "(steward agent --join)").
var stewardCommand = regexp.MustCompile(`\bsteward (` + strings.Join(commandNames, "|") + `)\b`)

// commandWords is what is left of the library strings that name a
// steward command (docs/ARCHITECTURE.md, Errors), per file: how many
// string literals still do, and why each must. It only shrinks. When a
// message moves to the command layer (the library returns a sentinel or
// typed error and the command adds the words, text unchanged: cli.Advise,
// cli.LibraryAdvice), lower or remove the file's entry: the test fails on
// a count above it, and on one below it, so the list never holds more than
// what is left. Never add an entry or raise a count, except for a string
// that is not advice at all (a file's format, a log marker, a key label).
var commandWords = map[string]int{
	// Not advice: formats and labels whose text is fixed.
	"pkg/backup/auth.go":   1, // "steward backup auth key": the label the cluster backup key's ID is derived with; changing it changes every key ID
	"pkg/agent/member.go":  1, // runMarker "--- steward agent: starting": the line member logs are split at
	"pkg/agent/systemd.go": 1, // the unit file's comment, "Written by steward agent install"
	"pkg/join/join.go":     1, // a comment line of the join file, for whoever copies it to the host
}

// TestLibrariesNameNoCommand: no string literal of a non-test .go file
// under pkg/ names a steward command in backquotes, beyond commandWords.
// Libraries say what failed and why; the command adds the commands and
// flags of its advice (cli.Hint, cli.Advise).
func TestLibrariesNameNoCommand(t *testing.T) {
	root := filepath.Join("..", "..")
	got := map[string]int{}
	lines := map[string][]int{}
	err := filepath.WalkDir(filepath.Join(root, "pkg"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if s, err := strconv.Unquote(lit.Value); err == nil && stewardCommand.MatchString(s) {
				got[rel]++
				lines[rel] = append(lines[rel], fset.Position(lit.Pos()).Line)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for file, n := range got {
		if allowed := commandWords[file]; n > allowed {
			t.Errorf("%s: %d string literals name a steward command (lines %v), %d allowed: return a sentinel or typed error and let the command add the words (cli.Advise)", file, n, lines[file], allowed)
		}
	}
	for file, allowed := range commandWords {
		if n := got[file]; n < allowed {
			t.Errorf("%s: %d string literals name a steward command, the allowlist says %d: lower its entry in commandWords (it only shrinks)", file, n, allowed)
		}
	}
}

// TestCommandWordsBite: the pattern finds what it is about, and only that.
func TestCommandWordsBite(t *testing.T) {
	for _, s := range []string{"run `steward plan resume`", "(`steward down`)", "`steward adopt --undo m1` gives it back",
		`import it with "steward binaries import"`, "(steward agent --join)", "re-run steward recover"} {
		if !stewardCommand.MatchString(s) {
			t.Errorf("%q is not found", s)
		}
	}
	for _, s := range []string{"another steward process", "steward dir: %w", "`steward`", "the steward executable",
		"this steward knows the kinds", "a steward that cannot do it", "steward uptime", "steward-host:h1"} {
		if stewardCommand.MatchString(s) {
			t.Errorf("%q is found, and names no command", s)
		}
	}
}

// TestCommandNames: every command package of the command tree is in
// commandNames, so a new command is looked for too.
func TestCommandNames(t *testing.T) {
	ents, err := os.ReadDir(filepath.Join("..", "..", "cmd", "steward", "internal", "command"))
	if err != nil {
		t.Fatal(err)
	}
	// The packages whose name is not their command's.
	renamed := map[string]string{"initcluster": "init", "recovery": "recover"}
	n := 0
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		n++
		name := e.Name()
		if r, ok := renamed[name]; ok {
			name = r
		}
		if !slices.Contains(commandNames, name) {
			t.Errorf("command package %s: %q is not in commandNames", e.Name(), name)
		}
	}
	if n != len(commandNames) {
		t.Errorf("%d command packages, %d commandNames: remove the commands that are gone", n, len(commandNames))
	}
}
