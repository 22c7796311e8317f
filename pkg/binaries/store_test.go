package binaries

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestNormalizeVersion(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr string
	}{
		{in: "3.6.16", want: "3.6.16"},
		{in: "v3.6.16", want: "3.6.16"},
		{in: "3.5.0", want: "3.5.0"},
		{in: "v3.10.123", want: "3.10.123"},
		{in: "", wantErr: "not three"},
		{in: "3.6", wantErr: "not three"},
		{in: "3.6.16.1", wantErr: "not three"},
		{in: "vv3.6.16", wantErr: "not a number"},
		{in: "V3.6.16", wantErr: "not a number"},
		{in: "3.6.16-rc.0", wantErr: "not three"},
		{in: "3.6.16-rc0", wantErr: "not a number"},
		{in: "3.6.x", wantErr: "not a number"},
		{in: "3..16", wantErr: "not a number"},
		{in: " 3.6.16", wantErr: "not a number"},
		{in: "3.06.1", wantErr: "leading zero"},
		{in: "2.3.8", wantErr: "only etcd 3.x"},
		{in: "4.0.0", wantErr: "only etcd 3.x"},
		{in: "etcd-v3.6.16", wantErr: "not a number"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := NormalizeVersion(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "3.MINOR.PATCH") {
					t.Fatalf("NormalizeVersion(%q) = %q, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("NormalizeVersion(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestVersionFromName(t *testing.T) {
	tests := []struct {
		name string
		want string
	}{
		{"etcd-v3.6.16-linux-amd64.tar.gz", "3.6.16"},
		{"etcd-v3.5.35-linux-arm64.tgz", "3.5.35"},
		{"etcd-v3.6.16-linux-amd64", "3.6.16"},
		{"etcd-v3.6.16", "3.6.16"},
		{"v3.7.3", "3.7.3"},
		{"3.6.16", ""},
		{"bin", ""},
		{"etcd", ""},
		{"etcd-v3.6-linux-amd64.tar.gz", ""},
		{"etcd-v4.0.0-linux-amd64.tar.gz", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := versionFromName(tt.name)
			if got != tt.want || ok != (tt.want != "") {
				t.Fatalf("versionFromName(%q) = %q, %v; want %q", tt.name, got, ok, tt.want)
			}
		})
	}
}

func TestEmbeddedVersionIsValid(t *testing.T) {
	if _, err := NormalizeVersion(EmbeddedVersion()); err != nil {
		t.Fatalf("embedded version: %v", err)
	}
}

// fakeVersion creates a store entry for v with placeholder binaries (enough
// for Resolve and List, which do not run them).
func fakeVersion(t *testing.T, store, v string, importedAt time.Time, tools ...string) {
	t.Helper()
	dir := filepath.Join(store, DirPrefix+v)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, tool := range tools {
		p := filepath.Join(dir, tool)
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho etcd Version: "+v+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		files[tool] = sha256File(t, p)
	}
	data, err := json.Marshal(manifest{Version: v, ImportedAt: importedAt, Source: "test", Files: files})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestName), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestResolve(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	store := t.TempDir()
	fakeVersion(t, store, "3.5.2", time.Now(), "etcd", "etcdctl")
	s := Open(store)

	t.Run("embedded", func(t *testing.T) {
		for _, v := range []string{EmbeddedVersion(), "v" + EmbeddedVersion()} {
			got, err := s.Resolve(v)
			if err != nil {
				t.Fatalf("Resolve(%s): %v", v, err)
			}
			want := Exec{Path: self, Args: []string{"etcd"}, Version: EmbeddedVersion(), Embedded: true}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Resolve(%s) = %+v, want %+v", v, got, want)
			}
		}
	})
	t.Run("store", func(t *testing.T) {
		got, err := s.Resolve("v3.5.2")
		if err != nil {
			t.Fatal(err)
		}
		want := Exec{Path: filepath.Join(store, "etcd-v3.5.2", "etcd"), Version: "3.5.2"}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Resolve = %+v, want %+v", got, want)
		}
	})
	t.Run("store wins over embedded", func(t *testing.T) {
		store := t.TempDir()
		fakeVersion(t, store, EmbeddedVersion(), time.Now(), "etcd")
		got, err := Open(store).Resolve(EmbeddedVersion())
		if err != nil {
			t.Fatal(err)
		}
		if got.Embedded || got.Path != filepath.Join(store, "etcd-v"+EmbeddedVersion(), "etcd") || len(got.Args) != 0 {
			t.Fatalf("Resolve = %+v, want the store binary", got)
		}
	})
	t.Run("missing", func(t *testing.T) {
		_, err := s.Resolve("3.99.0")
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("Resolve(3.99.0) error = %v, want ErrNotFound", err)
		}
		for _, want := range []string{"etcd 3.99.0 is not in the binary store " + store, "embedded version " + EmbeddedVersion() + ": import it: "} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
		}
		if p, ok := ProblemOf(fmt.Errorf("start: %w", err)); !ok || p != (Problem{Kind: KindNotInStore, Version: "3.99.0", Store: store, Message: err.Error()}) {
			t.Errorf("problem of %v = %+v, %t", err, p, ok)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		_, err := s.Resolve("latest")
		if err == nil || errors.Is(err, ErrNotFound) {
			t.Fatalf("Resolve(latest) error = %v, want a version error", err)
		}
	})
}

func TestList(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	embedded := Binary{Version: EmbeddedVersion(), Path: self, Tools: []string{"etcd"}, Source: SourceEmbedded}
	stored := func(store, v string, tools ...string) Binary {
		return Binary{Version: v, Path: filepath.Join(store, "etcd-v"+v, "etcd"), Tools: tools, Source: SourceStore, ImportedAt: at}
	}

	tests := []struct {
		name  string
		setup func(t *testing.T, store string)
		want  func(store string) []Binary
	}{
		{
			name:  "missing store",
			setup: func(t *testing.T, store string) { os.Remove(store) },
			want:  func(string) []Binary { return []Binary{embedded} },
		},
		{
			name: "sorted by semver with embedded",
			setup: func(t *testing.T, store string) {
				fakeVersion(t, store, "3.10.1", at, "etcd")
				fakeVersion(t, store, "3.5.2", at, "etcd", "etcdctl", "etcdutl")
				fakeVersion(t, store, "3.6.0", at, "etcd", "etcdutl")
				fakeVersion(t, store, "3.99.0", at, "etcd")
				// Ignored: temporary, set-aside and foreign entries.
				for _, d := range []string{".import-123", "etcd-v3.6.0.replaced-20250101T000000Z", "etcd-vX", "other"} {
					if err := os.Mkdir(filepath.Join(store, d), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.WriteFile(filepath.Join(store, "etcd-v3.1.0"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: func(store string) []Binary {
				return []Binary{
					stored(store, "3.5.2", "etcd", "etcdctl", "etcdutl"),
					stored(store, "3.6.0", "etcd", "etcdutl"),
					embedded,
					stored(store, "3.10.1", "etcd"),
					stored(store, "3.99.0", "etcd"),
				}
			},
		},
		{
			name: "store holds the embedded version",
			setup: func(t *testing.T, store string) {
				fakeVersion(t, store, EmbeddedVersion(), at, "etcd", "etcdctl")
			},
			want: func(store string) []Binary {
				return []Binary{stored(store, EmbeddedVersion(), "etcd", "etcdctl")}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := filepath.Join(t.TempDir(), "store")
			if err := os.Mkdir(store, 0o755); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, store)
			got, err := Open(store).List()
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want(store)
			if len(got) != len(want) {
				t.Fatalf("List = %+v\nwant %+v", got, want)
			}
			for i := range got {
				if !reflect.DeepEqual(got[i], want[i]) || !got[i].ImportedAt.Equal(want[i].ImportedAt) {
					t.Fatalf("List[%d] = %+v\nwant %+v", i, got[i], want[i])
				}
			}
		})
	}
}

func TestBinaryJSON(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		in   Binary
		want string
	}{
		{
			in:   Binary{Version: "3.6.16", Path: "/s/etcd-v3.6.16/etcd", Tools: []string{"etcd", "etcdctl"}, Source: SourceStore, ImportedAt: at},
			want: `{"version":"3.6.16","path":"/s/etcd-v3.6.16/etcd","tools":["etcd","etcdctl"],"source":"store","importedAt":"2025-01-02T03:04:05Z"}`,
		},
		{
			in:   Binary{Version: "3.6.16", Path: "/usr/bin/steward", Tools: []string{"etcd"}, Source: SourceEmbedded},
			want: `{"version":"3.6.16","path":"/usr/bin/steward","tools":["etcd"],"source":"embedded"}`,
		},
	}
	for _, tt := range tests {
		got, err := json.Marshal(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tt.want {
			t.Errorf("json = %s\nwant   %s", got, tt.want)
		}
	}
}

// TestEmbeddedVersionPinned guards go.mod: the linked etcd server must stay
// on the 3.6 line that current Kubernetes ships. A stray `go get` or
// `go mod tidy` that resolves a missing etcd package to the newest release
// would silently move it.
func TestEmbeddedVersionPinned(t *testing.T) {
	if v := EmbeddedVersion(); !strings.HasPrefix(v, "3.6.") {
		t.Fatalf("embedded etcd is %s; Steward links the 3.6 line (pin go.etcd.io/etcd/* in go.mod)", v)
	}
}
