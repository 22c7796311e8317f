package restore

import (
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/datadir"
)

// TestDecide: of each data dir's kind (per host), the newest keep copies
// are kept, never fewer than one; staged dirs are removed.
func TestDecide(t *testing.T) {
	at := func(h int) time.Time { return time.Date(2026, 11, 27, h, 0, 0, 0, time.UTC) }
	mk := func(host, dd, kind string, h int) Leftover {
		return Leftover{Host: host, Kept: datadir.Kept{Kind: kind, DataDir: dd, Created: at(h)}}
	}
	ls := []Leftover{
		mk("", "/d/m1/data", datadir.KindPreRestore, 1),
		mk("", "/d/m1/data", datadir.KindPreRestore, 2),
		mk("", "/d/m1/data", datadir.KindPreRestore, 3),
		mk("", "/d/m1/data", datadir.KindReplaced, 1),
		mk("h2", "/d/m1/data", datadir.KindPreRestore, 1), // another host's same path
		mk("", "/d/m2/data", datadir.KindRestoring, 4),
	}
	for _, tt := range []struct {
		keep int
		want []string // in the order of ls
	}{
		{1, []string{"remove", "remove", "keep", "keep", "keep", "remove"}},
		{2, []string{"remove", "keep", "keep", "keep", "keep", "remove"}},
		{5, []string{"keep", "keep", "keep", "keep", "keep", "remove"}},
	} {
		c := append([]Leftover(nil), ls...)
		sortNewestLast(c)
		decide(c, tt.keep)
		for i, l := range ls {
			for _, d := range c {
				if d.Host == l.Host && d.Kind == l.Kind && d.Created.Equal(l.Created) && d.Action != tt.want[i] {
					t.Errorf("keep %d: %q %s %s %v: %s (%s), want %s", tt.keep, d.Host, d.DataDir, d.Kind, d.Created, d.Action, d.Reason, tt.want[i])
				}
			}
		}
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 51200: "50.0 KiB", 2 << 30: "2.0 GiB", 3 << 40: "3.0 TiB"} {
		if got := HumanBytes(n); got != want {
			t.Errorf("HumanBytes(%d) = %s, want %s", n, got, want)
		}
	}
}
