// Package subnet picks private IPv4 subnets for the network namespaces this
// machine's tests and local Kubernetes clusters create (test/harness's
// hosts, internal/localkube's nodes): one machine-wide lock held while a
// subnet is picked and put on a bridge, and the first free 10.x.y.0/24.
package subnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
)

// Lock takes the machine-wide lock (/run/lock/steward-netns.lock, or in the
// temporary directory) that every picker holds from Free until its bridge
// has the address, so two processes never pick the same subnet. unlock
// releases it.
func Lock() (unlock func(), err error) {
	dir := "/run/lock"
	if _, err := os.Stat(dir); err != nil {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, "steward-netns.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("subnet lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("subnet lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// Free returns the first 10.x.y.0/24 (x from 213) that no IPv4 address of
// the root namespace's interfaces overlaps. Hold Lock around it and the
// address's assignment.
func Free() (netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Prefix{}, err
	}
	var used []netip.Prefix
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP.To4()); ok {
				ones, _ := ipn.Mask.Size()
				used = append(used, netip.PrefixFrom(ip, ones).Masked())
			}
		}
	}
	return first(used)
}

// first is the first 10.x.y.0/24 (x from 213 to 223) no prefix of used
// overlaps.
func first(used []netip.Prefix) (netip.Prefix, error) {
	for x := 213; x < 224; x++ {
	next:
		for y := 0; y < 256; y++ {
			p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(x), byte(y), 0}), 24)
			for _, u := range used {
				if u.Overlaps(p) {
					continue next
				}
			}
			return p, nil
		}
	}
	return netip.Prefix{}, errors.New("no free 10.x.y.0/24 between 10.213.0.0 and 10.223.255.0")
}
