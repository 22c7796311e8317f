package localkube

import "testing"

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
