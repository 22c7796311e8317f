package harness

import (
	"slices"
	"testing"
)

// TestSystemdGroups: the test systemd's cleanup removes the new groups of
// systemd units only, never those another process made meanwhile (a local
// Kubernetes node's and its pods': the suite runs them side by side, and
// removing an empty pod group the kubelet just made breaks that pod).
func TestSystemdGroups(t *testing.T) {
	before := []string{"./lk1c1-node-a", "./lk1c1-node-a/kubepods"}
	now := []string{
		"./system.slice/steward-m1.service", "./system.slice", "./init.scope",
		"./lk1c1-node-a/kubepods/burstable/pod1/ctr", "./lk1c1-node-a/kubepods/burstable/pod1", "./lk1c1-node-a/kubepods",
		"./lk1c1-node-b", "./lk1c1-node-a",
	}
	want := []string{"./system.slice/steward-m1.service", "./system.slice", "./init.scope"}
	if got := systemdGroups(before, now); !slices.Equal(got, want) {
		t.Fatalf("systemdGroups = %v, want %v", got, want)
	}
}
