package backup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadKeyMode: a key file other users may read or write is refused,
// with its mode and the fix named; an owner-only one loads.
func TestLoadKeyMode(t *testing.T) {
	tests := []struct {
		mode    os.FileMode
		wantErr string
	}{
		{mode: 0o600},
		{mode: 0o400},
		{mode: 0o640, wantErr: "has mode 0640"},
		{mode: 0o644, wantErr: "has mode 0644"},
		{mode: 0o602, wantErr: "has mode 0602"},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "key")
			if err := os.WriteFile(p, []byte(strings.Repeat("ab", 32)), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tt.mode); err != nil {
				t.Fatal(err)
			}
			_, err := LoadKey(p)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("LoadKey(%v) = %v", tt.mode, err)
				}
				return
			}
			if !errors.Is(err, ErrKeyFileMode) || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "chmod 600 "+p) {
				t.Fatalf("LoadKey(%v) = %v; want ErrKeyFileMode, %q and the chmod", tt.mode, err, tt.wantErr)
			}
		})
	}
}

// TestGenerateKeyFile: a new key file is 0600 and loads; an existing file
// is never overwritten.
func TestGenerateKeyFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "key")
	k, err := GenerateKeyFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v; want mode 0600", fi.Mode(), err)
	}
	if l, err := LoadKey(p); err != nil || l.ID() != k.ID() {
		t.Fatalf("LoadKey of a generated key: %v", err)
	}
	before, _ := os.ReadFile(p)
	if _, err := GenerateKeyFile(p); !errors.Is(err, os.ErrExist) {
		t.Fatalf("GenerateKeyFile over an existing file = %v; want ErrExist", err)
	}
	if after, _ := os.ReadFile(p); string(after) != string(before) {
		t.Fatal("GenerateKeyFile changed an existing key file")
	}
}
