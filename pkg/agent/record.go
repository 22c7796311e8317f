package agent

import (
	"fmt"

	"github.com/coreos/go-semver/semver"
)

// CheckVersionStep decides whether binary version next may run on a data dir
// last run by version last. etcd moves one minor at a time: skipping a minor
// upgrade is refused, and an older minor is refused unless the caller has
// gone through etcd's downgrade procedure (allowDowngrade).
func CheckVersionStep(last, next string, allowDowngrade bool) error {
	lv, err := semver.NewVersion(last)
	if err != nil {
		return fmt.Errorf("version record holds %q: %w", last, err)
	}
	nv, err := semver.NewVersion(next)
	if err != nil {
		return fmt.Errorf("version %q: %w", next, err)
	}
	switch {
	case nv.Major != lv.Major:
		return fmt.Errorf("data dir was last run by etcd %s; etcd %s is a different major version", last, next)
	case nv.Minor > lv.Minor+1:
		return fmt.Errorf("data dir was last run by etcd %s; etcd %s skips a minor version: upgrade through %d.%d first",
			last, next, lv.Major, lv.Minor+1)
	case nv.Minor < lv.Minor && !allowDowngrade:
		return fmt.Errorf("data dir was last run by etcd %s; etcd %s is an older minor version: roll back with etcd's downgrade procedure, not by swapping binaries",
			last, next)
	}
	return nil
}
