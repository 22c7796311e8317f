package pagecache

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ReadAround keeps the kernel's read-around on every memory map of the
// file at path in this process, until the returned stop is called (stop
// waits for it to end). bbolt advises its map MADV_RANDOM as it maps the
// file, before its open for writing walks every page to rebuild a
// freelist the file does not hold: one 4 KiB read per fault. The walk
// goes mostly in file order, so every few milliseconds the maps of the
// file (found by device and inode in /proc/self/maps) are advised
// MADV_NORMAL, and the kernel reads around each fault. Unlike Prefetch,
// nothing is read ahead of the walk, so where memory is short (a memory
// cgroup) no read-ahead is evicted before the walk reaches it. Advice
// only: errors are ignored, content is never affected.
func ReadAround(path string) (stop func()) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return func() {}
	}
	// The path as the kernel names the map's file, for a file system
	// whose maps name another device (overlayfs).
	if abs, err := filepath.Abs(path); err == nil {
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			path = real
		}
	}
	done := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			adviseMaps(st.Dev, st.Ino, path)
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// adviseMaps advises MADV_NORMAL every map of this process of the file
// with device dev and inode ino, or at path.
func adviseMaps(dev, ino uint64, path string) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	want := fmt.Sprintf("%02x:%02x", unix.Major(dev), unix.Minor(dev))
	s := bufio.NewScanner(f)
	for s.Scan() {
		// start-end perms offset major:minor inode path
		fs := strings.Fields(s.Text())
		if len(fs) < 6 || !(fs[3] == want && fs[4] == strconv.FormatUint(ino, 10) || fs[5] == path) {
			continue
		}
		start, end, ok := strings.Cut(fs[0], "-")
		if !ok {
			continue
		}
		a, err1 := strconv.ParseUint(start, 16, 64)
		b, err2 := strconv.ParseUint(end, 16, 64)
		if err1 != nil || err2 != nil || b <= a {
			continue
		}
		// A map gone since the read makes ENOMEM; nothing else can be
		// there that advice would harm.
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, uintptr(a), uintptr(b-a), unix.MADV_NORMAL)
	}
}
