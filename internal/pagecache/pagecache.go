// Package pagecache keeps large sequential file writes and reads from
// crowding the page cache: a Writer bounds the dirty pages it leaves (it
// starts the write-back of each chunk and waits for the one before), and
// can drop what it wrote; a Reader drops what it read behind it. Inside a
// memory cgroup the page cache is charged to the group, and dirty pages
// cannot be reclaimed before they are written back, so a restore writing a
// gigabyte within 512 MB otherwise stalls on reclaim. Clean pages are left
// cached unless asked, since a reader soon after (a consistency check)
// reads them for free when memory is plentiful, and the kernel reclaims
// them cheaply when it is not. All of it is advice to the kernel: errors
// are ignored, and content is never affected.
package pagecache

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Chunk is how much a Writer writes before it starts the write-back of
// those bytes and waits for the chunk before them.
const Chunk = 8 << 20

// Writer writes to a file sequentially from its current offset, leaving
// at most about two chunks of it dirty.
type Writer struct {
	// Drop drops each chunk from the page cache once on disk, and
	// everything at Sync: for a file no one reads soon.
	Drop bool

	f       *os.File
	off     int64 // file offset of the next byte written
	started int64 // write-back started for [waited, started)
	waited  int64 // pages before this offset are on disk
}

// NewWriter returns a Writer writing to f at its current offset.
func NewWriter(f *os.File) *Writer {
	off, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		off = 0
	}
	return &Writer{f: f, off: off, started: off, waited: off}
}

// Write writes p to the file.
func (w *Writer) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.off += int64(n)
	if w.off-w.started >= Chunk {
		w.advance()
	}
	return n, err
}

// advance waits for the write-back the previous call started (dropping
// those pages with Drop), and starts the write-back of what was written
// since.
func (w *Writer) advance() {
	fd := int(w.f.Fd())
	if w.started > w.waited {
		_ = unix.SyncFileRange(fd, w.waited, w.started-w.waited,
			unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
		if w.Drop {
			_ = unix.Fadvise(fd, w.waited, w.started-w.waited, unix.FADV_DONTNEED)
		}
		w.waited = w.started
	}
	_ = unix.SyncFileRange(fd, w.started, w.off-w.started, unix.SYNC_FILE_RANGE_WRITE)
	w.started = w.off
}

// Sync flushes the file (fsync); with Drop, it then drops the file's pages.
func (w *Writer) Sync() error {
	if err := w.f.Sync(); err != nil {
		return err
	}
	if w.Drop {
		Drop(w.f)
	}
	w.started, w.waited = w.off, w.off
	return nil
}

// Reader reads a file sequentially, dropping what it read behind it, and
// the whole file at its end (or on any error).
type Reader struct {
	f       *os.File
	off     int64 // file offset of the next byte read
	dropped int64
}

// NewReader returns a Reader reading f from its current offset.
func NewReader(f *os.File) *Reader {
	off, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		off = 0
	}
	return &Reader{f: f, off: off, dropped: off}
}

// Read reads from the file.
func (r *Reader) Read(p []byte) (int, error) {
	n, err := r.f.Read(p)
	r.off += int64(n)
	switch {
	case err != nil:
		Drop(r.f)
		r.dropped = r.off
	case r.off-r.dropped >= Chunk:
		// From a chunk further back: pages still under read-ahead when
		// they were last dropped are not dropped then.
		from := max(0, r.dropped-Chunk)
		_ = unix.Fadvise(int(r.f.Fd()), from, r.off-from, unix.FADV_DONTNEED)
		r.dropped = r.off
	}
	return n, err
}

// Drop drops f's clean pages from the page cache (call after Sync for
// pages it wrote).
func Drop(f *os.File) {
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// DropFile drops the clean pages of the file at path from the page cache.
func DropFile(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	Drop(f)
	_ = f.Close()
}

// Prefetch reads the file at path in order, in the background, until its
// end or until the returned stop is called (stop waits for it to finish).
// It is for a reader that walks the file mostly in file order but one
// small page fault at a time (bbolt, whose memory map is advised
// MADV_RANDOM, rebuilding its freelist as it opens a database): the
// kernel then reads the file in large requests a little ahead of it. When
// memory is short, the pages it read longest ago go first, and those are
// the ones the walk has passed.
func Prefetch(path string) (stop func()) {
	f, err := os.Open(path)
	if err != nil {
		return func() {}
	}
	done := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		defer close(done)
		defer f.Close()
		buf := make([]byte, 1<<20)
		for {
			select {
			case <-quit:
				return
			default:
			}
			if _, err := f.Read(buf); err != nil {
				return
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}
