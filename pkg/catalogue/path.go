package catalogue

import (
	"fmt"
	"slices"

	"github.com/coreos/go-semver/semver"
)

// HopKind says what one hop of a path does.
type HopKind string

// Hop kinds.
const (
	// Patch moves within a minor line (either way; etcd allows both).
	Patch HopKind = "patch"
	// Upgrade moves to the next minor line.
	Upgrade HopKind = "upgrade"
	// Downgrade moves to the previous minor line.
	Downgrade HopKind = "downgrade"
)

// Hop is one step of a version path: every member goes from From to To.
type Hop struct {
	Kind HopKind `json:"kind"`
	From string  `json:"from"`
	To   string  `json:"to"`
	// Online is true for a downgrade that etcd's downgrade API performs
	// in place; a downgrade without it goes through a restore.
	Online bool `json:"online,omitempty"`
	// Reason explains a hop the operator did not ask for (a patch first).
	Reason string `json:"reason,omitempty"`
}

// Path returns the hops from one etcd version to another, one minor line at
// a time. An upgrade passes through the latest known patch of each
// intermediate line and first moves to a newer patch when the current one
// is below the minimum the next line requires. A downgrade passes through
// the latest known patch of each intermediate line. Equal versions give an
// empty path.
//
// Invariant: every hop changes the minor line by at most one, and no hop
// leaves a line from a patch below the next line's minimum.
func (c *Catalogue) Path(from, to string) ([]Hop, error) {
	fv, err := semver.NewVersion(from)
	if err != nil {
		return nil, fmt.Errorf("current version %q: %w", from, err)
	}
	tv, err := semver.NewVersion(to)
	if err != nil {
		return nil, fmt.Errorf("target version %q: %w", to, err)
	}
	if fv.Major != tv.Major {
		return nil, fmt.Errorf("etcd %s to %s changes the major version; Steward moves within one major version only", from, to)
	}
	if tv.PreRelease != "" {
		return nil, fmt.Errorf("target %s is a pre-release; plans use released versions only", to)
	}
	switch {
	case fv.Equal(*tv):
		return nil, nil
	case fv.Minor == tv.Minor:
		return []Hop{{Kind: Patch, From: from, To: to}}, nil
	case fv.Minor < tv.Minor:
		return c.upgradePath(fv, tv)
	default:
		return c.downgradePath(fv, tv)
	}
}

func (c *Catalogue) upgradePath(fv, tv *semver.Version) ([]Hop, error) {
	var hops []Hop
	cur := fv
	for m := fv.Minor + 1; m <= tv.Minor; m++ {
		prev, next := minorString(fv.Major, m-1), minorString(fv.Major, m)
		e, ok := c.Minor(next)
		if !ok {
			return nil, fmt.Errorf("etcd %s is not in the version catalogue, so Steward cannot plan %s to %s: add it to %s (see docs/upgrades.md)", next, fv, tv, FileName)
		}
		if !slices.Contains(e.UpgradeFrom, prev) {
			return nil, fmt.Errorf("the version catalogue does not allow etcd %s to upgrade to %s (upgradeFrom: %v)", prev, next, e.UpgradeFrom)
		}
		if min, ok := e.MinimumFrom[prev]; ok {
			mv := semver.New(min)
			if cur.LessThan(*mv) {
				pe, ok := c.Minor(prev)
				if !ok {
					return nil, fmt.Errorf("etcd %s must first move to %s or later, but %s is not in the version catalogue", cur, min, prev)
				}
				lv := semver.New(pe.Latest)
				if lv.LessThan(*mv) {
					return nil, fmt.Errorf("etcd %s must first move to %s or later, but the catalogue's latest %s is %s", cur, min, prev, pe.Latest)
				}
				hops = append(hops, Hop{Kind: Patch, From: cur.String(), To: lv.String(),
					Reason: fmt.Sprintf("etcd %s requires %s %s or later before the upgrade", next, prev, min)})
				cur = lv
			}
		}
		target := semver.New(e.Latest)
		if m == tv.Minor {
			target = tv
		}
		hops = append(hops, Hop{Kind: Upgrade, From: cur.String(), To: target.String()})
		cur = target
	}
	return hops, nil
}

func (c *Catalogue) downgradePath(fv, tv *semver.Version) ([]Hop, error) {
	var hops []Hop
	cur := fv
	for m := fv.Minor - 1; m >= tv.Minor; m-- {
		from, to := minorString(fv.Major, m+1), minorString(fv.Major, m)
		e, ok := c.Minor(from)
		if !ok {
			return nil, fmt.Errorf("etcd %s is not in the version catalogue, so Steward cannot plan %s to %s: add it to %s", from, fv, tv, FileName)
		}
		if !slices.Contains(e.DowngradeTo, to) {
			return nil, fmt.Errorf("the version catalogue does not allow etcd %s to go back to %s (downgradeTo: %v)", from, to, e.DowngradeTo)
		}
		var target *semver.Version
		if m == tv.Minor {
			target = tv
		} else {
			te, ok := c.Minor(to)
			if !ok {
				return nil, fmt.Errorf("etcd %s is not in the version catalogue, so Steward cannot plan %s to %s", to, fv, tv)
			}
			target = semver.New(te.Latest)
		}
		hops = append(hops, Hop{Kind: Downgrade, From: cur.String(), To: target.String(), Online: e.OnlineDowngrade})
		cur = target
	}
	return hops, nil
}
