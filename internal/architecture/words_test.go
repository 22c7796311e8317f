package architecture

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// stewardCommand is a steward command named in backquotes, as advice
// writes it ("run `steward plan resume`").
var stewardCommand = regexp.MustCompile("`steward [a-z]")

// commandWords is what is left of the library strings that name a
// steward command (docs/ARCHITECTURE.md, Errors): per file, how many
// string literals still do. It only shrinks. When a message moves to the
// command layer (the library returns a sentinel or typed error and the
// command adds the words, text unchanged), lower or remove the file's
// entry: the test fails on a count above it, and on one below it, so the
// list never holds more than what is left. Never add an entry or raise a
// count.
var commandWords = map[string]int{
	// Persisted in plans or recorded in status: the text is stored or shown
	// by other commands (`plan show`, `status`), which cannot add words to it.
	"pkg/upgrade/preflight.go": 4, // pre-flight checks, re-run as plan steps
	"pkg/upgrade/planner.go":   1, // mixed versions, also a preflight step's error
	"pkg/status/conditions.go": 2, // plan conditions of `steward status`
	"pkg/status/renewer.go":    2, // the renewal condition of `steward status`
	"pkg/certs/renewloop.go":   2, // the renewal loop's last error, shown by status
	"pkg/handover/handover.go": 2, // ErrSuperseded, also inside plan steps
	// Joined into longer messages, where the advice sits in the middle.
	"pkg/membership/members.go": 4, // a replace to re-run, also inside recovery's messages
	"pkg/recovery/recover.go":   7, // `steward recover` to re-run, in the middle of its errors
	"pkg/recovery/journal.go":   1,
	"pkg/spec/validate.go":      2, // one line of a list of validation problems
	"pkg/adopt/plan.go":         1, // the health gate, also a plan step
	"pkg/pki/rotationfiles.go":  1, // ErrRotationInProgress, met by many commands and the agent
	"pkg/cluster/external.go":   2, // RequireOwnCerts, met by every certificate command
	"pkg/status/status.go":      1, // a member answering for another, met by every command
	// Returned by an agent over its API, then shown by the CLI.
	"pkg/agent/member.go":      2,
	"pkg/agent/certs.go":       1,
	"pkg/agentapi/client.go":   1, // UnreachableError, joined per host
	"pkg/binaries/recorded.go": 2, // also returned by agents
	// Progress lines said in the middle of an operation.
	"pkg/bootstrap/bootstrap.go": 2,
	"pkg/bootstrap/init.go":      1,
	"pkg/bootstrap/takeover.go":  1,
	"pkg/restore/restore.go":     1,
	// A comment line of the join file, for whoever copies it.
	"pkg/join/join.go": 1,
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
	for _, s := range []string{"run `steward plan resume`", "(`steward down`)", "`steward adopt --undo m1` gives it back"} {
		if !stewardCommand.MatchString(s) {
			t.Errorf("%q is not found", s)
		}
	}
	for _, s := range []string{"another steward process", "steward dir: %w", "`steward`", "the steward executable"} {
		if stewardCommand.MatchString(s) {
			t.Errorf("%q is found, and names no command", s)
		}
	}
}
