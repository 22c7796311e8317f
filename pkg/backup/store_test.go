package backup

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLocalStorePutFile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		exists  bool // the object name is taken already
		wantErr string
	}{
		{name: "new object"},
		{name: "name taken", exists: true, wantErr: "already exists"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := NewLocalStore(filepath.Join(dir, "store"))
			if err != nil {
				t.Fatal(err)
			}
			src := filepath.Join(dir, "snapshot.pack")
			want := bytes.Repeat([]byte("snapshot"), 1000)
			if err := os.WriteFile(src, want, 0o644); err != nil {
				t.Fatal(err)
			}
			old := []byte("the object stored before")
			if tc.exists {
				if err := s.Put(t.Context(), "full/x.db.zst", bytes.NewReader(old)); err != nil {
					t.Fatal(err)
				}
			}
			err = s.PutFile(t.Context(), "full/x.db.zst", src)
			got, rerr := os.ReadFile(filepath.Join(s.Dir, "full", "x.db.zst"))
			if rerr != nil {
				t.Fatal(rerr)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				if !bytes.Equal(got, old) {
					t.Error("the existing object was changed")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Error("stored object differs from the file")
			}
			fi, err := os.Stat(filepath.Join(s.Dir, "full", "x.db.zst"))
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("object mode %v (err %v), want 0600", fi.Mode().Perm(), err)
			}
			names, err := s.List(t.Context(), "full/")
			if err != nil || len(names) != 1 {
				t.Errorf("List = %v, %v; want the one object", names, err)
			}
		})
	}
}
