package binaries

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// checkImported checks the layout, modes and manifest of an imported
// version against the binaries it came from.
func checkImported(t *testing.T, store string, b Binary, srcDir string, tools []string) {
	t.Helper()
	dir := filepath.Join(store, "etcd-v"+testVersion)
	if b.Version != testVersion || b.Source != SourceStore || b.Path != filepath.Join(dir, "etcd") || !reflect.DeepEqual(b.Tools, tools) {
		t.Fatalf("Binary = %+v, want version %s, store source, path %s, tools %v", b, testVersion, filepath.Join(dir, "etcd"), tools)
	}
	if time.Since(b.ImportedAt) > time.Hour || b.ImportedAt.Location() != time.UTC {
		t.Errorf("ImportedAt = %v, want about now in UTC", b.ImportedAt)
	}
	for p, perm := range map[string]os.FileMode{store: 0o755, dir: 0o755, filepath.Join(dir, ManifestName): 0o644} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != perm {
			t.Errorf("%s mode %v, want %v", p, fi.Mode().Perm(), perm)
		}
	}
	m, err := readManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != testVersion || !m.ImportedAt.Equal(b.ImportedAt) || m.Source == "" || len(m.Files) != len(tools) {
		t.Errorf("manifest = %+v", m)
	}
	for _, tool := range tools {
		p := filepath.Join(dir, tool)
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o755 {
			t.Errorf("%s mode %v, want 0755", p, fi.Mode().Perm())
		}
		want := sha256File(t, filepath.Join(srcDir, tool))
		if got := sha256File(t, p); got != want || m.Files[tool] != want {
			t.Errorf("%s: sha256 %s, manifest %s, source %s", tool, got, m.Files[tool], want)
		}
	}
	entries, err := os.ReadDir(store)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".import-") {
			t.Errorf("temporary directory %s left in the store", e.Name())
		}
	}
	// The raw manifest has the documented field names.
	data, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"version", "importedAt", "source", "files"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("manifest has no %q field: %s", k, data)
		}
	}
}

func TestImportDirectory(t *testing.T) {
	cache := etcdCache(t, testVersion)
	etcdSum := sha256File(t, filepath.Join(cache, "etcd"))
	all := []string{"etcd", "etcdctl", "etcdutl"}

	tests := []struct {
		name  string
		src   func(t *testing.T) string
		opt   ImportOptions
		tools []string
	}{
		{
			name:  "version from v directory name",
			src:   func(*testing.T) string { return cache },
			tools: all,
		},
		{
			name:  "version from etcd-v directory name with sha256",
			src:   func(t *testing.T) string { return copyBinaries(t, cache, "etcd-v"+testVersion+"-linux-amd64", all...) },
			opt:   ImportOptions{SHA256: strings.ToUpper(etcdSum)},
			tools: all,
		},
		{
			name:  "explicit v version, etcd only",
			src:   func(t *testing.T) string { return copyBinaries(t, cache, "bin", "etcd") },
			opt:   ImportOptions{Version: "v" + testVersion},
			tools: []string{"etcd"},
		},
		{
			name:  "explicit version overrides name, etcdutl only",
			src:   func(t *testing.T) string { return copyBinaries(t, cache, "v3.5.0", "etcd", "etcdutl") },
			opt:   ImportOptions{Version: testVersion},
			tools: []string{"etcd", "etcdutl"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := tt.src(t)
			store := filepath.Join(t.TempDir(), "store") // created by Import
			s := Open(store)
			b, err := s.Import(context.Background(), src, tt.opt)
			if err != nil {
				t.Fatalf("Import: %v", err)
			}
			checkImported(t, store, b, src, tt.tools)

			ex, err := s.Resolve(testVersion)
			if err != nil || ex.Path != b.Path || ex.Embedded || len(ex.Args) != 0 {
				t.Errorf("Resolve = %+v, %v; want the store binary", ex, err)
			}
			list, err := s.List()
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, l := range list {
				if l.Version == testVersion {
					found = found || reflect.DeepEqual(l, b)
					if l.Source != SourceStore {
						t.Errorf("List has %+v", l)
					}
				}
			}
			if !found {
				t.Errorf("List = %+v, want it to include %+v", list, b)
			}
			if r, err := s.Verify(context.Background(), testVersion); err != nil || !r.OK {
				t.Errorf("Verify = %+v, %v", r, err)
			}
		})
	}
}

func TestImportTarball(t *testing.T) {
	cache := etcdCache(t, testVersion)
	tarball, sum := releaseTarball(t, cache, testVersion)

	tests := []struct {
		name    string
		opt     ImportOptions
		wantErr []string
		is      error // a sentinel the error wraps, or nil
	}{
		{name: "no sha256"},
		{name: "correct sha256", opt: ImportOptions{SHA256: sum}},
		{name: "correct sha256 and version", opt: ImportOptions{SHA256: " " + strings.ToUpper(sum) + "\n", Version: "v" + testVersion}},
		{
			name:    "wrong sha256",
			opt:     ImportOptions{SHA256: strings.Repeat("ab", 32)},
			wantErr: []string{"sha256 mismatch", strings.Repeat("ab", 32), sum},
		},
		{name: "malformed sha256", opt: ImportOptions{SHA256: "abc"}, wantErr: []string{"invalid sha256"}},
		{
			name:    "claimed version differs",
			opt:     ImportOptions{Version: "3.6.15"},
			wantErr: []string{"claimed version 3.6.15", "etcd Version: " + testVersion},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := t.TempDir()
			before := snapshot(t, store)
			b, err := Open(store).Import(context.Background(), tarball, tt.opt)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Import succeeded: %+v", b)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				assertSnapshot(t, store, before)
				return
			}
			if err != nil {
				t.Fatalf("Import: %v", err)
			}
			checkImported(t, store, b, cache, []string{"etcd", "etcdctl"})
			if r, err := Open(store).Verify(context.Background(), testVersion); err != nil || !r.OK {
				t.Errorf("Verify = %+v, %v", r, err)
			}
		})
	}
}

func TestImportTarballRejectsBadEntries(t *testing.T) {
	script := "#!/bin/sh\necho etcd Version: " + testVersion + "\n"
	tests := []struct {
		name    string
		entries []tarEntry
		wantErr string
	}{
		{name: "dot-dot", entries: []tarEntry{{Name: "../etcd", Data: script}}, wantErr: `contains ".."`},
		{name: "nested dot-dot", entries: []tarEntry{{Name: "etcd-v3.6.16-linux-amd64/../../x/etcd", Data: script}}, wantErr: `contains ".."`},
		{name: "dot-dot in ignored entry", entries: []tarEntry{{Name: "etcd", Data: script}, {Name: "a/../../README", Data: "x"}}, wantErr: `contains ".."`},
		{name: "absolute", entries: []tarEntry{{Name: "/tmp/etcd", Data: script}}, wantErr: "absolute path"},
		{name: "no etcd", entries: []tarEntry{{Name: "etcd-v3.6.16-linux-amd64/etcdctl", Data: script}}, wantErr: "no etcd binary"},
		{name: "etcd too deep", entries: []tarEntry{{Name: "a/b/etcd", Data: script}}, wantErr: "no etcd binary"},
		{name: "etcd is a directory", entries: []tarEntry{{Name: "x/etcd/", Dir: true}}, wantErr: "no etcd binary"},
		{name: "duplicate etcd", entries: []tarEntry{{Name: "etcd", Data: script}, {Name: "x/etcd", Data: script}}, wantErr: "more than one etcd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tarball := filepath.Join(t.TempDir(), "etcd-v"+testVersion+"-linux-amd64.tar.gz")
			writeTarball(t, tarball, tt.entries)
			store := t.TempDir()
			before := snapshot(t, store)
			_, err := Open(store).Import(context.Background(), tarball, ImportOptions{})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Import error = %v, want %q", err, tt.wantErr)
			}
			assertSnapshot(t, store, before)
		})
	}
}

func TestImportErrorsLeaveStoreUnchanged(t *testing.T) {
	cache := etcdCache(t, testVersion)
	store := t.TempDir()
	s := Open(store)
	if _, err := s.Import(context.Background(), cache, ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, store)
	wrongSum := strings.Repeat("0", 64)
	etcdSum := sha256File(t, filepath.Join(cache, "etcd"))
	notTarball := filepath.Join(t.TempDir(), "etcd-v3.6.16.zip")
	if err := os.WriteFile(notTarball, []byte("zip"), 0o644); err != nil {
		t.Fatal(err)
	}
	badGzip := filepath.Join(t.TempDir(), "etcd-v3.6.16-linux-amd64.tar.gz")
	if err := os.WriteFile(badGzip, []byte("not gzip"), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		src     func(t *testing.T) string
		opt     ImportOptions
		wantErr []string
		is      error // a sentinel the error wraps, or nil
	}{
		{
			name:    "directory sha256 mismatch",
			src:     func(*testing.T) string { return cache },
			opt:     ImportOptions{SHA256: wrongSum},
			wantErr: []string{"sha256 mismatch", wrongSum, etcdSum},
		},
		{
			name:    "claimed version differs from etcd --version",
			src:     func(*testing.T) string { return cache },
			opt:     ImportOptions{Version: "3.7.3"},
			wantErr: []string{"import etcd 3.7.3", "claimed version 3.7.3", "etcd Version: " + testVersion},
		},
		{
			name:    "version deduced from name differs from etcd --version",
			src:     func(t *testing.T) string { return copyBinaries(t, cache, "etcd-v3.5.35", "etcd") },
			wantErr: []string{"claimed version 3.5.35", "etcd Version: " + testVersion},
		},
		{
			name:    "no version",
			src:     func(t *testing.T) string { return copyBinaries(t, cache, "bin", "etcd") },
			wantErr: []string{`cannot tell the etcd version from the name "bin"`},
			is:      ErrUnknownVersion,
		},
		{
			name:    "invalid version",
			src:     func(*testing.T) string { return cache },
			opt:     ImportOptions{Version: "3.6"},
			wantErr: []string{"invalid etcd version"},
		},
		{
			name:    "no etcd in directory",
			src:     func(t *testing.T) string { return copyBinaries(t, cache, "v"+testVersion, "etcdctl") },
			wantErr: []string{"no etcd binary"},
		},
		{
			name:    "missing source",
			src:     func(t *testing.T) string { return filepath.Join(t.TempDir(), "v"+testVersion) },
			wantErr: []string{"no such file"},
		},
		{
			name:    "not a tarball",
			src:     func(*testing.T) string { return notTarball },
			wantErr: []string{"neither a directory nor"},
		},
		{
			name:    "corrupt tarball",
			src:     func(*testing.T) string { return badGzip },
			wantErr: []string{"read tarball"},
		},
		{
			name: "different binary without force",
			src: func(t *testing.T) string {
				d := copyBinaries(t, cache, "v"+testVersion, "etcd")
				appendByte(t, filepath.Join(d, "etcd"))
				return d
			},
			wantErr: []string{"a different etcd binary is stored under this version", etcdSum},
			is:      ErrDifferentBinary,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := s.Import(context.Background(), tt.src(t), tt.opt)
			if err == nil {
				t.Fatalf("Import succeeded: %+v", b)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q does not wrap %q", err, tt.is)
			}
			if tt.is != nil && strings.Contains(err.Error(), "--") {
				t.Errorf("error %q names a flag: the command adds that", err)
			}
			assertSnapshot(t, store, before)
		})
	}
}

func TestReimport(t *testing.T) {
	cache := etcdCache(t, testVersion)
	store := t.TempDir()
	s := Open(store)
	ctx := context.Background()
	first, err := s.Import(ctx, cache, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Identical binary, from a tarball this time: a no-op.
	before := snapshot(t, store)
	tarball, _ := releaseTarball(t, cache, testVersion)
	for _, opt := range []ImportOptions{{}, {Force: true}} {
		again, err := s.Import(ctx, tarball, opt)
		if err != nil {
			t.Fatalf("re-import (%+v): %v", opt, err)
		}
		if !reflect.DeepEqual(again, first) {
			t.Fatalf("re-import = %+v, want the existing %+v", again, first)
		}
		assertSnapshot(t, store, before)
	}

	// A different binary reporting the same version replaces the old one
	// only with Force, and the old directory is kept aside.
	changed := copyBinaries(t, cache, "v"+testVersion, "etcd", "etcdctl")
	appendByte(t, filepath.Join(changed, "etcd"))
	newSum := sha256File(t, filepath.Join(changed, "etcd"))
	if _, err := s.Import(ctx, changed, ImportOptions{}); !errors.Is(err, ErrDifferentBinary) {
		t.Fatalf("import of a different binary without force: %v", err)
	}
	assertSnapshot(t, store, before)
	replaced, err := s.Import(ctx, changed, ImportOptions{Force: true})
	if err != nil {
		t.Fatalf("forced import: %v", err)
	}
	checkImported(t, store, replaced, changed, []string{"etcd", "etcdctl"})
	if got := sha256File(t, replaced.Path); got != newSum {
		t.Fatalf("stored etcd sha256 %s, want %s", got, newSum)
	}
	aside, err := filepath.Glob(filepath.Join(store, "etcd-v"+testVersion+".replaced-*"))
	if err != nil || len(aside) != 1 {
		t.Fatalf("set-aside directories = %v, %v; want one", aside, err)
	}
	if m, err := readManifest(aside[0]); err != nil || m.Files["etcd"] != sha256File(t, filepath.Join(cache, "etcd")) {
		t.Fatalf("set-aside manifest = %+v, %v", m, err)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, b := range list {
		if b.Version == testVersion {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("List = %+v, want %s once", list, testVersion)
	}
	results, err := s.VerifyAll(ctx)
	if err != nil || len(results) != 1 || !results[0].OK {
		t.Fatalf("VerifyAll = %+v, %v", results, err)
	}
}
