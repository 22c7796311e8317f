package pagecache

import (
	"bytes"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// resident counts f's pages in the page cache (mincore).
func resident(t *testing.T, path string) (in, total int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	for _, v := range vec {
		if v&1 != 0 {
			in++
		}
	}
	return in, len(vec)
}

// droppable skips the test where the kernel keeps file pages regardless
// (tmpfs: the page cache is the file).
func droppable(t *testing.T, dir string) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC {
		t.Skipf("%s is in memory: its pages cannot be dropped", dir)
	}
}

// TestWriterAndReader: what goes through a dropping Writer and then a
// Reader is the same bytes, and afterwards few of the file's pages remain
// cached.
func TestWriterAndReader(t *testing.T) {
	dir := t.TempDir()
	droppable(t, dir)
	data := make([]byte, 5*Chunk+12345)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "f")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := NewWriter(f)
	w.Drop = true
	// Odd-sized writes, so chunk boundaries fall inside them.
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 1<<20+7)
		if _, err := w.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	in, total := resident(t, path)
	// Before Sync: at most the last two chunks, and what is unwritten.
	if max := 2*Chunk/os.Getpagesize() + 1<<20/os.Getpagesize() + 2; in > max {
		t.Errorf("%d of %d pages cached while writing, want at most %d", in, total, max)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if in, total := resident(t, path); in > total/10 {
		t.Errorf("%d of %d pages cached after Sync", in, total)
	}

	r, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := io.ReadAll(NewReader(r))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read back other bytes than written")
	}
	if in, total := resident(t, path); in > total/10 {
		t.Errorf("%d of %d pages cached after reading through a Reader", in, total)
	}
}

// TestWriterFromOffset: a Writer continues a file at its offset, and one
// that does not drop leaves the file's pages cached (clean).
func TestWriterFromOffset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("head:"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	w := NewWriter(f)
	body := bytes.Repeat([]byte("x"), Chunk+3)
	if _, err := w.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if in, total := resident(t, path); in < total/2 {
		t.Errorf("%d of %d pages cached after a Writer that keeps them", in, total)
	}
	f.Close()
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, append([]byte("head:"), body...)) {
		t.Fatalf("file holds %d bytes, want %d", len(got), 5+len(body))
	}
}

// TestPrefetch: Prefetch brings a file whose pages were dropped back into
// the page cache, in the background; stop ends it (also early, and for a
// file that is not there).
func TestPrefetch(t *testing.T) {
	dir := t.TempDir()
	droppable(t, dir)
	path := filepath.Join(dir, "f")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter(f)
	w.Drop = true
	if _, err := w.Write(bytes.Repeat([]byte("p"), 4*Chunk)); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if in, total := resident(t, path); in > total/10 {
		t.Fatalf("%d of %d pages cached before Prefetch", in, total)
	}
	stop := Prefetch(path)
	deadline := time.Now().Add(30 * time.Second)
	for {
		in, total := resident(t, path)
		if in >= total*9/10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pages cached 30 s after Prefetch", in, total)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()

	DropFile(path)
	Prefetch(path)() // stopped at once
	Prefetch(filepath.Join(dir, "none"))()
}
