package upgrade

import (
	"errors"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/catalogue"
	"github.com/etcd-steward/steward/pkg/plan"
)

var (
	up56   = catalogue.Hop{Kind: catalogue.Upgrade, From: "3.5.35", To: "3.6.16"}
	up67   = catalogue.Hop{Kind: catalogue.Upgrade, From: "3.6.16", To: "3.7.3"}
	down76 = catalogue.Hop{Kind: catalogue.Downgrade, From: "3.7.3", To: "3.6.16", Online: true}
	down54 = catalogue.Hop{Kind: catalogue.Downgrade, From: "3.5.35", To: "3.4.23"}
)

func TestChooseStrategy(t *testing.T) {
	for _, tc := range []struct {
		members int
		hops    []catalogue.Hop
		want    string
	}{
		{3, []catalogue.Hop{up56, up67}, StrategyRolling},
		{1, []catalogue.Hop{up56, up67}, StrategyOffline},
		{1, []catalogue.Hop{down76}, StrategyRolling}, // etcd's online downgrade works on one member
		{3, []catalogue.Hop{down54}, StrategyRestore},
	} {
		if got := chooseStrategy(tc.members, tc.hops); got != tc.want {
			t.Errorf("%d members, %v: %s, want %s", tc.members, tc.hops, got, tc.want)
		}
	}
}

func TestCheckStrategy(t *testing.T) {
	for _, tc := range []struct {
		strategy string
		members  int
		hops     []catalogue.Hop
		base     string
		want     string // "" for no error
	}{
		{StrategyRolling, 3, []catalogue.Hop{up56}, "", ""},
		{StrategyRolling, 3, []catalogue.Hop{down54}, "", "no online downgrade"},
		{StrategyOffline, 1, []catalogue.Hop{up56, up67}, "", ""},
		{StrategyOffline, 3, []catalogue.Hop{up56}, "", "for a single member and this cluster has 3"},
		{StrategyOffline, 1, []catalogue.Hop{down76}, "", "only upgrades"},
		{StrategyRestore, 3, []catalogue.Hop{up56, up67}, "", ""},
		{StrategyRestore, 3, []catalogue.Hop{down54}, "", "none is recorded"},
		{StrategyRestore, 3, []catalogue.Hop{down54}, "backup-1", ""},
		{"sideways", 3, []catalogue.Hop{up56}, "", "unknown strategy"},
	} {
		err := checkStrategy(tc.strategy, tc.members, tc.hops, tc.base)
		if noOnline := strings.Contains(tc.want, "no online downgrade"); errors.Is(err, ErrNoOnlineDowngrade) != noOnline {
			t.Errorf("%s, %v: errors.Is(%v, ErrNoOnlineDowngrade) = %v, want %v", tc.strategy, tc.hops, err, !noOnline, noOnline)
		}
		if err != nil && strings.Contains(err.Error(), "--") {
			t.Errorf("%s, %v: %q names a flag: the command adds that", tc.strategy, tc.hops, err)
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s, %d members, %v: %v", tc.strategy, tc.members, tc.hops, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s, %d members, %v: %v, want an error saying %q", tc.strategy, tc.members, tc.hops, err, tc.want)
		}
	}
}

func TestOfflineAndRestoreSteps(t *testing.T) {
	collect := func(f func(add func(plan.Step))) string {
		var kinds []string
		f(func(s plan.Step) { kinds = append(kinds, s.Kind+":"+s.Member+":"+s.Version) })
		return strings.Join(kinds, " ")
	}
	hops := []catalogue.Hop{up56, up67}
	if got, want := collect(func(add func(plan.Step)) { addOffline(add, hops, "m1", "3.5.35", "3.7.3") }),
		"preflight::3.7.3 backup::3.5.35 offline:m1:3.6.16 member:m1:3.7.3 cluster-version::3.7.3"; got != want {
		t.Errorf("offline steps:\n got %s\nwant %s", got, want)
	}
	if got, want := collect(func(add func(plan.Step)) { addRestore(add, hops, "3.5.35", "3.7.3") }),
		"preflight::3.7.3 backup::3.5.35 replace::3.7.3 offline::3.6.16 start::3.7.3 cluster-version::3.7.3"; got != want {
		t.Errorf("restore steps:\n got %s\nwant %s", got, want)
	}
	if got, want := collect(func(add func(plan.Step)) { addRestoreBack(add, "3.6.16", "3.5.35", "b1") }),
		"preflight::3.5.35 backup::3.6.16 replace::3.5.35 start::3.5.35 cluster-version::3.5.35"; got != want {
		t.Errorf("rollback by restore steps:\n got %s\nwant %s", got, want)
	}
}
