package pagecache

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// TestReadAround: a map of the file advised MADV_RANDOM (as bbolt advises
// its map) is advised back to normal while ReadAround runs, as the kernel
// reports in the map's VmFlags ("rr": random reads); a map of another file
// keeps its advice.
func TestReadAround(t *testing.T) {
	dir := t.TempDir()
	mapRandom := func(name string) (string, []byte) {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, make([]byte, 1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b, err := unix.Mmap(int(f.Fd()), 0, 1<<20, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Munmap(b) })
		if err := unix.Madvise(b, unix.MADV_RANDOM); err != nil {
			t.Fatal(err)
		}
		return path, b
	}
	path, b := mapRandom("db")
	_, other := mapRandom("other")
	if !randomReads(t, b) || !randomReads(t, other) {
		t.Fatal("MADV_RANDOM not shown in VmFlags")
	}
	stop := ReadAround(path)
	deadline := time.Now().Add(5 * time.Second)
	for randomReads(t, b) {
		if time.Now().After(deadline) {
			stop()
			t.Fatal("the map of the file is still advised MADV_RANDOM after 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if !randomReads(t, other) {
		t.Fatal("the map of another file lost its advice")
	}
}

// randomReads reports whether /proc/self/smaps shows the map starting at
// b's first byte advised MADV_RANDOM.
func randomReads(t *testing.T, b []byte) bool {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	start := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(&b[0])))
	in := false
	for _, l := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			in = strings.HasPrefix(l, start)
			continue
		}
		if in && strings.HasPrefix(l, "VmFlags:") {
			return slices.Contains(strings.Fields(l)[1:], "rr")
		}
	}
	t.Fatalf("no map at %s in /proc/self/smaps", start)
	return false
}

// TestDirectWriter: whole aligned blocks are written with O_DIRECT (where
// the file system takes it), the first write that is not aligned switches
// the file to buffered writes for good, and the file holds every byte
// written in order either way.
func TestDirectWriter(t *testing.T) {
	block := make([]byte, 1<<20) // a large allocation: page-aligned
	if !aligned(block, 0) {
		t.Fatal("a 1 MiB allocation is not 4 KiB-aligned: the test cannot exercise O_DIRECT")
	}
	for i := range block {
		block[i] = byte(i % 251)
	}
	for _, tc := range []struct {
		name       string
		writes     [][]byte
		directThen []bool // Direct() after each write
	}{
		{"aligned blocks, then a tail", [][]byte{block, block, block[:1000]}, []bool{true, true, false}},
		{"unaligned first", [][]byte{block[:100], block}, []bool{false, false}},
		{"an aligned block at an unaligned offset", [][]byte{block[:512*3], block}, []bool{false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "object")
			f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			w := NewDirectWriter(f)
			if !w.Direct() {
				t.Fatalf("O_DIRECT refused on %s (its file system): the test cannot exercise it", path)
			}
			var want []byte
			for i, p := range tc.writes {
				if n, err := w.Write(p); err != nil || n != len(p) {
					t.Fatalf("write %d: %d, %v", i, n, err)
				}
				want = append(want, p...)
				if w.Direct() != tc.directThen[i] {
					t.Errorf("after write %d: direct %v, want %v", i, w.Direct(), tc.directThen[i])
				}
				fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
				if err != nil || (fl&unix.O_DIRECT != 0) != w.Direct() {
					t.Errorf("after write %d: the file's O_DIRECT flag is %v, Direct() %v (err %v)", i, fl&unix.O_DIRECT != 0, w.Direct(), err)
				}
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("the file holds %d bytes, not the %d written", len(got), len(want))
			}
		})
	}
}
