package harness

// Loopback addresses of their own: every Env's members listen on an
// address no other test of any test process on this machine uses at the
// same time, so tests run side by side (go test -parallel, and several
// packages at once) without one taking a port another's cluster holds
// while its member is stopped. Linux routes all of 127.0.0.0/8 to the
// loopback interface, so 127.X.Y.1 needs no configuration and changes
// nothing on the machine.
//
// An address is held by an exclusive flock(2) on a file named for it in
// addrLockDir: the kernel drops the lock when its holder exits, however it
// exits, so a crashed test process never keeps an address. The holder
// removes the file when it releases the address; a taker checks, after
// locking, that the path still names the file it locked (the inode), so
// it never holds a file another process has just removed.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// addrLockDir holds one lock file per loopback address in use.
var addrLockDir = filepath.Join(os.TempDir(), "steward-test-addrs")

// LoopbackAddr returns a loopback address 127.X.Y.1 (X at least 1, so
// never one of 127.0.0.0/24, where ports default) that no other caller on
// this machine holds, held until the test's cleanup.
func LoopbackAddr(tb testing.TB) string {
	tb.Helper()
	a, release, err := takeLoopbackAddr()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(release)
	return a
}

// takeLoopbackAddr takes a free address, trying random ones.
func takeLoopbackAddr() (string, func(), error) {
	if err := os.MkdirAll(addrLockDir, 0o700); err != nil {
		return "", nil, fmt.Errorf("loopback address locks: %w", err)
	}
	for range 1000 {
		a := fmt.Sprintf("127.%d.%d.1", 1+rand.IntN(254), rand.IntN(256))
		release, err := lockAddr(filepath.Join(addrLockDir, a))
		if errors.Is(err, errAddrTaken) {
			continue
		}
		if err != nil {
			return "", nil, err
		}
		return a, release, nil
	}
	return "", nil, fmt.Errorf("no free loopback address in 1000 tries (locks in %s)", addrLockDir)
}

var errAddrTaken = errors.New("address taken")

// lockAddr locks the file at path or reports errAddrTaken.
func lockAddr(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("loopback address lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errAddrTaken
		}
		return nil, fmt.Errorf("loopback address lock %s: %w", path, err)
	}
	// The holder before us may have removed the path between our open
	// and our lock: then we hold a file nobody else will look at.
	var locked, named syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &locked); err != nil {
		f.Close()
		return nil, err
	}
	if err := syscall.Stat(path, &named); err != nil || named.Ino != locked.Ino || named.Dev != locked.Dev {
		f.Close()
		return nil, errAddrTaken
	}
	return func() {
		// Remove before unlocking: a taker that opened the old file
		// fails the inode check above and tries another address.
		_ = os.Remove(path)
		f.Close()
	}, nil
}
