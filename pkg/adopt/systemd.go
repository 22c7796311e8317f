package adopt

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/etcd-steward/steward/pkg/refusal"
)

// FromUnitFile reads a systemd unit (etcd.service) at path, with its
// drop-ins (UnitDropInDirs): its ExecStart, Environment= and
// EnvironmentFile= (read on this host), and the version of the program
// ExecStart runs when it is on this host.
func FromUnitFile(ctx context.Context, p string) (MemberRun, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return MemberRun{}, refusal.New(ErrSource, "read systemd unit: %v", err)
	}
	var dropIns []DropIn
	for _, dp := range DropInFiles(filepath.Base(p), UnitDropInDirs(p)) {
		db, err := os.ReadFile(dp)
		if err != nil {
			return MemberRun{}, refusal.New(ErrSource, "read drop-in of systemd unit %s: %v", p, err)
		}
		dropIns = append(dropIns, DropIn{Path: dp, Data: db})
	}
	r, err := ParseUnit(b, p, os.ReadFile, dropIns...)
	if err != nil {
		return MemberRun{}, err
	}
	if v, err := BinaryVersion(ctx, r.Binary); err == nil {
		r.Version = v
	}
	return r, nil
}

// UnitSearchPath is where systemd looks for system units and their
// drop-ins, highest priority first (systemd.unit(5), "Unit File Load
// Path").
var UnitSearchPath = []string{
	"/etc/systemd/system.control", "/run/systemd/system.control", "/run/systemd/transient",
	"/run/systemd/generator.early", "/etc/systemd/system", "/etc/systemd/system.attached",
	"/run/systemd/system", "/run/systemd/system.attached", "/run/systemd/generator",
	"/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system",
	"/run/systemd/generator.late",
}

// UnitDropInDirs are the directories searched for drop-ins of the unit at
// p, highest priority first: the unit's own directory (it may have been
// given from outside the search path), then UnitSearchPath.
func UnitDropInDirs(p string) []string {
	dirs := []string{filepath.Dir(p)}
	for _, d := range UnitSearchPath {
		if d != dirs[0] {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// DropInFiles lists the drop-ins systemd applies to the unit named unit
// (etcd.service), searching dirs (highest priority first): every *.conf
// of UNIT.d/ and of the type-wide service.d/ in each; a file name in a
// higher-priority directory hides the same name in lower ones; the result
// is sorted by file name, whatever the directory, which is the order
// systemd applies them in.
func DropInFiles(unit string, dirs []string) []string {
	byName := map[string]string{}
	var names []string
	typeDir := unit[strings.LastIndex(unit, ".")+1:] + ".d"
	for _, d := range dirs {
		for _, sub := range []string{unit + ".d", typeDir} {
			ents, err := os.ReadDir(filepath.Join(d, sub))
			if err != nil {
				continue
			}
			for _, e := range ents {
				n := e.Name()
				if !strings.HasSuffix(n, ".conf") || e.IsDir() {
					continue
				}
				if _, seen := byName[n]; seen {
					continue
				}
				byName[n] = filepath.Join(d, sub, n)
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = byName[n]
	}
	return out
}

// DropIn is one drop-in file of a unit: its path and contents.
type DropIn struct {
	Path string
	Data []byte
}

// ParseUnit reads a systemd unit's bytes; p is its path, for Source;
// readFile reads the unit's environment files and an etcd config file;
// dropIns (in the order DropInFiles gives) are applied after the unit, each
// file starting outside any section, as systemd does.
//
// It follows systemd.service(5) and systemd.exec(5) as far as a unit
// starting etcd needs: lines ending in a backslash continue on the next,
// the last ExecStart= of [Service] is the one run (an empty one resets),
// its prefixes (-, @, +, !, :) are dropped, words are split as systemd
// does (quotes, backslash escapes), ${VAR} is replaced by its value and a
// word $VAR by its value's words; Environment= assignments (quoted or not)
// override EnvironmentFile= ones, and a file prefixed with - may be
// missing.
func ParseUnit(b []byte, p string, readFile func(string) ([]byte, error), dropIns ...DropIn) (MemberRun, error) {
	var (
		section, execStart string
		envAssign          []string
		envFiles           []string
		workDir            string
		lines              []string
		dropInPaths        []string
	)
	lines = append(lines, unitLines(b)...)
	for _, d := range dropIns {
		lines = append(lines, "") // a new file: no section yet
		lines = append(lines, unitLines(d.Data)...)
		dropInPaths = append(dropInPaths, d.Path)
	}
	for _, line := range lines {
		if line == "" {
			section = ""
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line
			continue
		}
		if section != "[Service]" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "ExecStart":
			execStart = v
		case "Environment":
			if v == "" {
				envAssign = nil
				continue
			}
			words, err := splitWords(v, nil)
			if err != nil {
				return MemberRun{}, refusal.New(ErrSource, "systemd unit %s: Environment=%s: %v", p, v, err)
			}
			envAssign = append(envAssign, words...)
		case "EnvironmentFile":
			if v == "" {
				envFiles = nil
				continue
			}
			envFiles = append(envFiles, v)
		case "WorkingDirectory":
			workDir = strings.TrimPrefix(v, "-")
		}
	}
	if execStart == "" {
		return MemberRun{}, refusal.New(ErrSource, "systemd unit %s has no ExecStart= in [Service]", p)
	}
	// The environment: files in order, then the unit's own assignments.
	var env []string
	for _, f := range envFiles {
		optional := strings.HasPrefix(f, "-")
		f = strings.TrimPrefix(f, "-")
		var fb []byte
		var err error
		if readFile != nil {
			fb, err = readFile(f)
		} else {
			err = os.ErrNotExist
		}
		if err != nil {
			if optional {
				continue
			}
			return MemberRun{}, refusal.New(ErrSource, "systemd unit %s: EnvironmentFile=%s: %v", p, f, err)
		}
		env = append(env, parseEnvFile(fb)...)
	}
	env = append(env, envAssign...)
	lookup := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		lookup[k] = v
	}
	cmd := strings.TrimLeft(execStart, "-@+!:")
	words, err := splitWords(cmd, lookup)
	if err != nil {
		return MemberRun{}, refusal.New(ErrSource, "systemd unit %s: ExecStart=%s: %v", p, execStart, err)
	}
	if len(words) == 0 {
		return MemberRun{}, refusal.New(ErrSource, "systemd unit %s: ExecStart= runs nothing", p)
	}
	if filepath.Base(words[0]) != "etcd" {
		return MemberRun{}, refusal.New(ErrSource, "systemd unit %s runs %s, not etcd", p, words[0])
	}
	// A last environment value wins, as in systemd.
	var dedup []string
	for k, v := range lookup {
		dedup = append(dedup, k+"="+v)
	}
	readConfig := func(cp string) ([]byte, error) {
		if readFile == nil {
			return nil, os.ErrNotExist
		}
		if !filepath.IsAbs(cp) && workDir != "" {
			cp = filepath.Join(workDir, cp)
		}
		return readFile(cp)
	}
	r, err := build(words[1:], dedup, readConfig, nil, workDir, Source{Kind: KindUnit, Path: p, DropIns: dropInPaths})
	if err != nil {
		return MemberRun{}, err
	}
	r.Binary = words[0]
	return r, nil
}

// unitLines returns a unit file's logical lines: continuations joined,
// comments and blank lines dropped.
func unitLines(b []byte) []string {
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || line[0] == '#' || line[0] == ';') {
			continue
		}
		if cur.Len() > 0 && (strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";")) {
			continue // a comment inside a continued line
		}
		if s, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(s)
			cur.WriteByte(' ')
			continue
		}
		cur.WriteString(line)
		out = append(out, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// splitWords splits a command line as systemd does: words separated by
// blanks, "..." and '...' quote, a backslash escapes the next character.
// With env, ${VAR} is replaced by its value inside a word and a whole word
// $VAR by its value's blank-separated words; without, $ is kept.
func splitWords(s string, env map[string]string) ([]string, error) {
	var (
		out     []string
		cur     strings.Builder
		inWord  bool
		quote   byte
		wordVar = func(w string) (string, bool) {
			if env == nil || !strings.HasPrefix(w, "$") || strings.HasPrefix(w, "${") {
				return "", false
			}
			name := w[1:]
			for _, c := range name {
				if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
					return "", false
				}
			}
			return name, name != ""
		}
	)
	flush := func(quoted bool) {
		if !inWord {
			return
		}
		w := cur.String()
		if name, ok := wordVar(w); ok && !quoted {
			out = append(out, strings.Fields(env[name])...)
		} else {
			out = append(out, w)
		}
		cur.Reset()
		inWord = false
	}
	quotedWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote == 0 && (c == '"' || c == '\''):
			quote, inWord, quotedWord = c, true, true
		case c == '\\' && i+1 < len(s) && quote != '\'':
			i++
			cur.WriteByte(s[i])
			inWord = true
		case quote == 0 && (c == ' ' || c == '\t'):
			flush(quotedWord)
			quotedWord = false
		case c == '$' && env != nil && i+1 < len(s) && s[i+1] == '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return nil, errUnclosed("${")
			}
			cur.WriteString(env[s[i+2:i+end]])
			i += end
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, errUnclosed(string(quote))
	}
	flush(quotedWord)
	return out, nil
}

type errUnclosed string

func (e errUnclosed) Error() string { return "unclosed " + string(e) }
