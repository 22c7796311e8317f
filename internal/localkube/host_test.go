package localkube

import (
	"strings"
	"testing"
)

func TestOwnerOf(t *testing.T) {
	for name, want := range map[string]int{
		"lk123b1": 123, "lk123v1-2": 123, "lk123n1-node-a": 123, "lk123c1-node-a": 123, "lk123c2-infra": 123,
		"stw123b1": 0, "lk": 0, "lkb": 0, "lk12x": 0, "eth0": 0, "lk123b": 0, "lk123-node-a": 0,
	} {
		if got := ownerOf(name); got != want {
			t.Errorf("ownerOf(%q) = %d, want %d", name, got, want)
		}
	}
}

// TestCheckRefuses: a configuration Up cannot run is refused before
// anything is made, each problem named.
func TestCheckRefuses(t *testing.T) {
	err := Config{Dir: "/var/lib/localkube", Nodes: 2, Version: "v1.36.3", KubeBin: t.TempDir()}.Check()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		"nodes: 2: a local cluster has 1 or 3 nodes",
		"directory /var/lib/localkube is under /var, which the nodes overlay",
		"Kubernetes v1.36.3 is not built",
		"no image to import",
		"steward binary",
		"versitygw binary",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v: lacks %q", err, want)
		}
	}
}
