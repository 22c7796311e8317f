package cluster

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestSpecWatch: a cluster.yaml broken under a running agent is logged
// once with its path and the error (it was logged nowhere), and its repair
// once; an unchanged state logs nothing more.
func TestSpecWatch(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	w := &SpecWatch{Dir: dir, Log: slog.New(slog.NewTextHandler(&buf, nil))}
	w.Check() // no spec yet: quiet
	port := 22000
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 1, Version: binaries.EmbeddedVersion(), StewardDir: dir, Host: "127.0.0.1",
		FreePort: func() (int, error) { port++; return port, nil }})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, spec.FileName)
	if err := s.Save(p); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(p)
	w.Check()
	if buf.Len() != 0 {
		t.Fatalf("a readable spec logged: %s", buf.String())
	}
	if err := os.WriteFile(p, append(good, []byte("members: [\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	w.Check()
	w.Check()
	out := buf.String()
	if strings.Count(out, "cluster spec unreadable") != 1 || !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "path="+p) || !strings.Contains(out, "err=") {
		t.Errorf("a broken spec, checked twice, want one error with path and err:\n%s", out)
	}
	buf.Reset()
	if err := os.WriteFile(p, good, 0o600); err != nil {
		t.Fatal(err)
	}
	w.Check()
	w.Check()
	if out := buf.String(); strings.Count(out, "cluster spec readable again") != 1 {
		t.Errorf("the repaired spec, want one line:\n%s", out)
	}
}
