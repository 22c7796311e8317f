package harness

import (
	"slices"
	"testing"
)

// TestSplitSysctls: a sysctl only one snapshot has (a module loaded
// meanwhile) is no change; a value changed and any other kind are.
func TestSplitSysctls(t *testing.T) {
	before := map[string]bool{"sysctl: net/ipv4/ip_forward = 0": true, "sysctl: vm/swappiness = 60": true, "link: lo": true}
	after := map[string]bool{"sysctl: net/ipv4/ip_forward = 1": true, "sysctl: vm/swappiness = 60": true,
		"sysctl: net/netfilter/nf_conntrack_max = 65536": true, "link: lo": true, "link: lk1b1": true}
	changes, appeared := SplitSysctls(before, after, DiffMachine(before, after))
	if want := []string{"+ link: lk1b1", "+ sysctl: net/ipv4/ip_forward = 1", "- sysctl: net/ipv4/ip_forward = 0"}; !slices.Equal(changes, want) {
		t.Errorf("changes = %q, want %q", changes, want)
	}
	if want := []string{"+ sysctl: net/netfilter/nf_conntrack_max = 65536"}; !slices.Equal(appeared, want) {
		t.Errorf("appeared = %q, want %q", appeared, want)
	}
}

// TestOthersNames: what other steward test processes make is not compared.
func TestOthersNames(t *testing.T) {
	for _, s := range []string{"stw123b1", "cpu/steward-images-4567", "/tmp/ctrd-123456/state/x/rootfs", "/tmp/ctrd-1"} {
		if !othersNames.MatchString(s) {
			t.Errorf("%q not taken for another test's", s)
		}
	}
	for _, s := range []string{"lk123b1", "cpu/lk123-node-a", "/tmp/localkube-1-x/nodes", "cpu/steward-images"} {
		if othersNames.MatchString(s) {
			t.Errorf("%q taken for another test's", s)
		}
	}
}
