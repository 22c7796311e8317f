package binaries

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestVerify(t *testing.T) {
	cache := etcdCache(t, testVersion)

	tests := []struct {
		name   string
		tamper func(t *testing.T, dir string)
		want   []string // substrings of the problems; none means OK
	}{
		{name: "intact", tamper: func(*testing.T, string) {}},
		{
			name:   "byte appended to etcd",
			tamper: func(t *testing.T, dir string) { appendByte(t, filepath.Join(dir, "etcd")) },
			want:   []string{"etcd: sha256 is"},
		},
		{
			name:   "byte appended to etcdctl",
			tamper: func(t *testing.T, dir string) { appendByte(t, filepath.Join(dir, "etcdctl")) },
			want:   []string{"etcdctl: sha256 is"},
		},
		{
			name: "etcdutl removed",
			tamper: func(t *testing.T, dir string) {
				if err := os.Remove(filepath.Join(dir, "etcdutl")); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"etcdutl: listed in the manifest but missing"},
		},
		{
			name: "etcdctl not executable",
			tamper: func(t *testing.T, dir string) {
				if err := os.Chmod(filepath.Join(dir, "etcdctl"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"etcdctl: not executable"},
		},
		{
			name: "etcd replaced by another version",
			tamper: func(t *testing.T, dir string) {
				p := filepath.Join(dir, "etcd")
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("#!/bin/sh\necho etcd Version: 3.5.1\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"etcd: sha256 is", "etcd --version reports 3.5.1, want " + testVersion},
		},
		{
			name: "corrupt manifest",
			tamper: func(t *testing.T, dir string) {
				if err := os.WriteFile(filepath.Join(dir, ManifestName), []byte("{"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"read manifest"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := t.TempDir()
			s := Open(store)
			ctx := context.Background()
			if _, err := s.Import(ctx, cache, ImportOptions{}); err != nil {
				t.Fatal(err)
			}
			tt.tamper(t, filepath.Join(store, "etcd-v"+testVersion))

			r, err := s.Verify(ctx, "v"+testVersion)
			all, allErr := s.VerifyAll(ctx)
			if len(all) != 1 || all[0].Version != r.Version || all[0].OK != r.OK || len(all[0].Problems) != len(r.Problems) {
				t.Errorf("VerifyAll = %+v, want [%+v]", all, r)
			}
			if r.Version != testVersion {
				t.Errorf("Version = %q", r.Version)
			}
			if len(tt.want) == 0 {
				if err != nil || allErr != nil || !r.OK || len(r.Problems) != 0 {
					t.Fatalf("Verify = %+v, %v; VerifyAll error %v", r, err, allErr)
				}
				return
			}
			if err == nil || allErr == nil || r.OK {
				t.Fatalf("Verify = %+v, %v; VerifyAll error %v: want problems", r, err, allErr)
			}
			if len(r.Problems) != len(tt.want) {
				t.Errorf("problems = %q, want %d", r.Problems, len(tt.want))
			}
			for _, w := range tt.want {
				if !strings.Contains(strings.Join(r.Problems, "\n"), w) || !strings.Contains(err.Error(), w) {
					t.Errorf("problems %q / error %q do not mention %q", r.Problems, err, w)
				}
			}
		})
	}
}

func TestVerifyMissing(t *testing.T) {
	store := t.TempDir()
	s := Open(store)
	r, err := s.Verify(context.Background(), "3.99.0")
	if !errors.Is(err, ErrNotFound) || r.OK {
		t.Fatalf("Verify(3.99.0) = %+v, %v; want ErrNotFound", r, err)
	}
	if _, err := s.Verify(context.Background(), "latest"); err == nil {
		t.Fatal("Verify(latest) succeeded")
	}
	all, err := s.VerifyAll(context.Background())
	if err != nil || len(all) != 0 {
		t.Fatalf("VerifyAll of an empty store = %+v, %v", all, err)
	}
}

func TestRunVersionTimeout(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "etcd")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := runVersion(ctx, bin)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("runVersion = %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("runVersion took %v", d)
	}
}
