package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
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
			s, src := storeBeside(t)
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
			err := s.PutFile(t.Context(), "full/x.db.zst", src)
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

// TestReadBackFile: a full backup stored from a local file is read back
// without reading the object again only when the store holds that very
// file (hard-linked) with the manifest's size; a copy in its place, a
// file changed after it was stored, or a manifest replaced is found.
func TestReadBackFile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		after   func(t *testing.T, stored, src string) // what happens to the store after the put
		wantErr string
	}{
		{name: "linked, intact"},
		{name: "copied in place, intact", after: func(t *testing.T, stored, src string) {
			b, err := os.ReadFile(stored)
			if err != nil {
				t.Fatal(err)
			}
			replaceFile(t, stored, b)
		}},
		{name: "copy in place with other bytes", after: func(t *testing.T, stored, src string) {
			b, err := os.ReadFile(stored)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 1
			replaceFile(t, stored, b)
		}, wantErr: "with SHA-256"},
		{name: "linked, cut short", after: func(t *testing.T, stored, src string) {
			if err := os.Truncate(src, 100); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "holds 100 bytes"},
		{name: "object gone", after: func(t *testing.T, stored, src string) {
			if err := os.Remove(stored); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, src := storeBeside(t)
			f, err := os.OpenFile(src, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			size, sum, err := packStream(f, bytes.NewReader(bytes.Repeat([]byte("snapshot"), 10000)), nil, zstd.SpeedFastest)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			auth := NewAuthKey([32]byte{1})
			m := Manifest{ID: NewID(KindFull, time.Now(), 7), Kind: KindFull, StartRevision: 1, EndRevision: 7,
				RawSize: 80000, Size: size, SHA256: sum, Compression: "zstd", CreatedAt: time.Now().UTC()}
			obj, err := os.Open(src)
			if err != nil {
				t.Fatal(err)
			}
			defer obj.Close()
			if err := putWithManifest(t.Context(), s, auth, &m, obj); err != nil {
				t.Fatal(err)
			}
			if linked, err := s.HoldsFile(m.Object, src); err != nil || !linked {
				t.Fatalf("HoldsFile = %v, %v after PutFile; want the file itself", linked, err)
			}
			if tc.after != nil {
				tc.after(t, filepath.Join(s.Dir, m.Object), src)
			}
			err = ReadBackFile(t.Context(), s, auth, m, src)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}

// replaceFile puts a new file with content b at path (another inode).
func replaceFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// storeBeside returns a local store and the path of a file to put into it,
// on the same file system (PutFile links it).
func storeBeside(t *testing.T) (*LocalStore, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := NewLocalStore(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	return s, filepath.Join(dir, "snapshot.pack")
}

// TestLocalStorePutRace: writers racing for one object name (two restores
// taking the same timeline number) see exactly one of them stored, its
// content whole, and every other refused; none replaces the winner, as a
// rename after a check would let it.
func TestLocalStorePutRace(t *testing.T) {
	s := &LocalStore{Dir: t.TempDir()}
	const writers = 16
	var (
		wg   sync.WaitGroup
		errs = make([]error, writers)
	)
	start := make(chan struct{})
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = s.Put(t.Context(), "timelines/00000002.json", bytes.NewReader(bytes.Repeat([]byte{byte('a' + i)}, 64<<10)))
		}()
	}
	close(start)
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("writers %d and %d both stored the object", won, i)
		case err == nil:
			won = i
		case !strings.Contains(err.Error(), "already exists"):
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no writer stored the object")
	}
	got, err := os.ReadFile(filepath.Join(s.Dir, "timelines", "00000002.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.Repeat([]byte{byte('a' + won)}, 64<<10)) {
		t.Fatalf("the stored object is not the winner's (writer %d)", won)
	}
	names, err := s.List(t.Context(), "timelines/")
	if err != nil || len(names) != 1 {
		t.Fatalf("List = %v, %v; want the one object (no temporary left listed)", names, err)
	}
}

// manifestPutFails is a store whose Put of a manifest fails: after storing
// it (landed, its reply lost) or before (not stored).
type manifestPutFails struct {
	*LocalStore
	landed bool
}

func (s manifestPutFails) Put(ctx context.Context, name string, r io.Reader) error {
	if !strings.HasSuffix(name, ".json") { // an object, not a manifest (manifestName)
		return s.LocalStore.Put(ctx, name, r)
	}
	if s.landed {
		if err := s.LocalStore.Put(ctx, name, r); err != nil {
			return err
		}
	}
	return errors.New("connection reset by peer")
}

// TestManifestPutFailure: a manifest whose upload failed but that landed
// (the same bytes read back) commits the backup, its object kept; one that
// did not land fails the backup and its object is deleted; either way no
// manifest is ever left without its object.
func TestManifestPutFailure(t *testing.T) {
	for _, landed := range []bool{true, false} {
		t.Run(fmt.Sprint("landed=", landed), func(t *testing.T) {
			ls, err := NewLocalStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			s := manifestPutFails{LocalStore: ls, landed: landed}
			auth := NewAuthKey([32]byte{1})
			var obj bytes.Buffer
			size, sum, err := packStream(&obj, bytes.NewReader(bytes.Repeat([]byte("snapshot"), 1000)), nil, zstd.SpeedFastest)
			if err != nil {
				t.Fatal(err)
			}
			m := Manifest{ID: NewID(KindFull, time.Now(), 7), Kind: KindFull, StartRevision: 1, EndRevision: 7,
				RawSize: 8000, Size: size, SHA256: sum, Compression: "zstd", CreatedAt: time.Now().UTC()}
			err = putWithManifest(t.Context(), s, auth, &m, &obj)
			_, objErr := ls.Get(t.Context(), m.Object)
			_, manErr := ls.Get(t.Context(), manifestName(m.Kind, m.ID))
			if landed {
				if err != nil || objErr != nil || manErr != nil {
					t.Fatalf("a manifest that landed: err %v, object %v, manifest %v; want success with both stored", err, objErr, manErr)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "connection reset") || !errors.Is(objErr, ErrNotExist) || !errors.Is(manErr, ErrNotExist) {
				t.Fatalf("a manifest that did not land: err %v, object %v, manifest %v; want the error, neither stored", err, objErr, manErr)
			}
		})
	}
}
