package datadir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseKeptName(t *testing.T) {
	for _, tt := range []struct {
		name, base, kind string
		ok               bool
	}{
		{"data.pre-restore-20261127T211348.682Z", "data", KindPreRestore, true},
		{"data-v3.7.3.removed-20261127T211348.682Z", "data-v3.7.3", KindRemoved, true},
		{"data.replaced-20261127T211348.682Z", "data", KindReplaced, true},
		{"data.failed-add-20261127T211348.682Z", "data", KindFailedAdd, true},
		{"data.restoring-20261127T211348.682Z", "data", KindRestoring, true},
		{"data.restoring-20261127T211348.682Z.version", "", "", false},
		{"data.restoring-x", "", "", false},
		{"data.restoring", "", "", false}, // the upgrade's own staging name
		{"data.other-20261127T211348.682Z", "", "", false},
		{".pre-restore-20261127T211348.682Z", "", "", false},
		{"data.pre-restore-20261327T211348.682Z", "", "", false}, // month 13
	} {
		base, kind, at, ok := ParseKeptName(tt.name)
		if ok != tt.ok || base != tt.base || kind != tt.kind || (ok && at.IsZero()) {
			t.Errorf("ParseKeptName(%q) = %q %q %v %v, want %q %q %v", tt.name, base, kind, at, ok, tt.base, tt.kind, tt.ok)
		}
	}
}

func FuzzParseKeptName(f *testing.F) {
	for _, s := range []string{"data.pre-restore-20261127T211348.682Z", "data.restoring-20261127T211348.682Z", "x", "a.removed-", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		base, kind, at, ok := ParseKeptName(name)
		if !ok {
			return
		}
		if want := base + "." + kind + "-" + at.Format(StampLayout); want != name {
			t.Fatalf("%q parsed as %q %q %v, which names %q", name, base, kind, at, want)
		}
	})
}

// TestFindAndRemoveKept: copies are found beside data dirs with their
// sizes (the version record moved with one counted and removed with it),
// oldest first; RemoveKept refuses anything not named as a copy, outside
// the given dirs, or a symlink, and removes nothing then; RemoveStaged
// removes only the staged dirs of its data dir.
func TestFindAndRemoveKept(t *testing.T) {
	root := t.TempDir()
	d := filepath.Join(root, "members", "m1")
	dd := filepath.Join(d, "data")
	mk := func(name string, size int) string {
		p := filepath.Join(d, name)
		if err := os.MkdirAll(filepath.Join(p, "member"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "member", "db"), make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mk("data", 1000)
	older := mk("data.pre-restore-20261127T100000.000Z", 50000)
	newer := mk("data.pre-restore-20261127T110000.000Z", 50000)
	staged := mk("data.restoring-20261127T120000.000Z", 4000)
	otherStaged := mk("other.restoring-20261127T120000.000Z", 4000)
	if err := os.WriteFile(RecordPath(older), []byte(`{"version":"3.6.16"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(root, "victim.pre-restore-20261127T100000.000Z")
	if err := os.MkdirAll(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(d, "data.removed-20261127T100000.000Z")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	ks, err := FindKept([]string{d, d, filepath.Join(root, "missing")}, func(p string) string {
		if p == dd {
			return "m1"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) != 4 || ks[0].Path != older || ks[1].Path != newer || ks[0].Member != "m1" || ks[0].DataDir != dd || ks[0].Kind != KindPreRestore {
		t.Fatalf("FindKept: %+v", ks)
	}
	if ks[0].Bytes < 50000 || ks[0].Created != time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC) {
		t.Errorf("older copy: %+v", ks[0])
	}
	for _, bad := range []string{dd, victim, link, filepath.Join(d, "data.pre-restore-x"), filepath.Join(d, "data.pre-restore-20261127T100000.000Z", "..", "data")} {
		if err := RemoveKept(bad, []string{d}); err == nil {
			t.Errorf("RemoveKept(%s) accepted", bad)
		}
	}
	for _, p := range []string{dd, victim, link} {
		if _, err := os.Lstat(p); err != nil {
			t.Fatalf("a refused removal removed %s", p)
		}
	}
	if err := RemoveKept(older, []string{d}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(older); err == nil {
		t.Error("copy not removed")
	}
	if _, err := os.Stat(RecordPath(older)); err == nil {
		t.Error("its version record not removed")
	}
	var removed []string
	if err := RemoveStaged(dd, func(p string) { removed = append(removed, p) }); err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != staged {
		t.Errorf("RemoveStaged removed %v, want %s", removed, staged)
	}
	for _, p := range []string{dd, newer, otherStaged} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("RemoveStaged removed %s", p)
		}
	}
	if !strings.HasSuffix(newer, "Z") {
		t.Fatal(newer)
	}
}
