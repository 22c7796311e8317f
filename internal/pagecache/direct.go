package pagecache

import (
	"errors"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// directBlock is the alignment O_DIRECT asks of memory, length and file
// offset: 4 KiB covers every logical block size Linux file systems use.
const directBlock = 4096

// DirectWriter writes a file sequentially, bypassing the page cache
// (O_DIRECT) for as long as what it is given allows: writes of whole 4 KiB
// blocks from 4 KiB-aligned memory at 4 KiB-aligned offsets. From the
// first write that does not (a file's tail), or on a file system that
// refuses O_DIRECT, it writes through the page cache, as os.File does.
// For a large file written once, synced and not read soon (a backup
// object a local store keeps): the kernel copies nothing into the page
// cache and has nothing left to write back at the sync.
type DirectWriter struct {
	f      *os.File
	flags  int   // f's status flags without O_DIRECT
	direct bool  // O_DIRECT is set on f
	off    int64 // file offset of the next byte written
}

// NewDirectWriter returns a DirectWriter writing to f at its current
// offset.
func NewDirectWriter(f *os.File) *DirectWriter {
	w := &DirectWriter{f: f}
	off, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return w
	}
	w.off = off
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil {
		return w
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_SETFL, fl|unix.O_DIRECT); err != nil {
		return w // tmpfs and others refuse it
	}
	w.flags, w.direct = fl, true
	return w
}

// Direct reports whether the next aligned write would bypass the page
// cache.
func (w *DirectWriter) Direct() bool { return w.direct }

// Write writes p to the file.
func (w *DirectWriter) Write(p []byte) (int, error) {
	if w.direct && !aligned(p, w.off) {
		w.buffered()
	}
	n, err := w.f.Write(p)
	if w.direct && n == 0 && errors.Is(err, unix.EINVAL) {
		// The file system's own alignment is stricter: write as os.File
		// does from now on.
		w.buffered()
		n, err = w.f.Write(p)
	}
	w.off += int64(n)
	return n, err
}

// buffered clears O_DIRECT: later writes go through the page cache.
func (w *DirectWriter) buffered() {
	if _, err := unix.FcntlInt(w.f.Fd(), unix.F_SETFL, w.flags); err == nil {
		w.direct = false
	}
}

// aligned reports whether p, written at file offset off, meets
// O_DIRECT's alignment.
func aligned(p []byte, off int64) bool {
	return len(p) > 0 && len(p)%directBlock == 0 && off%directBlock == 0 &&
		uintptr(unsafe.Pointer(unsafe.SliceData(p)))%directBlock == 0
}
