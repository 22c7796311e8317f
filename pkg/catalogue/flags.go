package catalogue

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/coreos/go-semver/semver"
)

// Flags returns extra etcd flags (name to value; leading dashes dropped) spelled
// the way etcd of the given version knows them: a flag a newer line renamed
// gets its old name on an older version and its new name from that line
// on; an --experimental-* flag that became a feature gate becomes a
// --feature-gates entry and back. A flag the version no longer accepts is
// an error naming the line that removed it.
func (c *Catalogue) Flags(version string, flags map[string]string) (map[string]string, error) {
	if len(flags) == 0 {
		return flags, nil
	}
	v, err := semver.NewVersion(version)
	if err != nil {
		return nil, fmt.Errorf("version %q: %w", version, err)
	}
	out := make(map[string]string, len(flags))
	for k, val := range flags {
		out[strings.TrimLeft(k, "-")] = val
	}
	gates := parseGates(out["feature-gates"])
	delete(out, "feature-gates")
	hasGates := false // the version accepts --feature-gates
	for _, e := range c.sortedMinors() {
		major, minor, _ := splitMinor(e.Minor)
		atOrAfter := v.Major > major || v.Major == major && v.Minor >= minor
		hasGates = hasGates || atOrAfter && len(e.FeatureGateFlags) > 0
		for old, renamed := range e.RenamedFlags {
			from, to := old, renamed
			if !atOrAfter {
				from, to = renamed, old
			}
			if val, ok := out[from]; ok {
				delete(out, from)
				if _, dup := out[to]; dup {
					return nil, fmt.Errorf("extra flags set both --%s and --%s (the same flag before and after etcd %s renamed it)", from, to, e.Minor)
				}
				out[to] = val
			}
		}
		for flag, gate := range e.FeatureGateFlags {
			if atOrAfter {
				if val, ok := out[flag]; ok {
					delete(out, flag)
					gates[gate] = val
				}
			} else if val, ok := gates[gate]; ok {
				delete(gates, gate)
				out[flag] = val
			}
		}
		if atOrAfter {
			for _, f := range e.RemovedFlags {
				if _, ok := out[f]; ok {
					return nil, fmt.Errorf("etcd %s does not accept --%s (removed in %s): remove it from the spec's etcd.extraFlags", version, f, e.Minor)
				}
			}
		}
	}
	if len(gates) > 0 {
		if !hasGates {
			return nil, fmt.Errorf("etcd %s has no --feature-gates, and Steward knows no older flag for %s", version, strings.Join(slices.Sorted(maps.Keys(gates)), ", "))
		}
		var parts []string
		for _, g := range slices.Sorted(maps.Keys(gates)) {
			parts = append(parts, g+"="+gates[g])
		}
		out["feature-gates"] = strings.Join(parts, ",")
	}
	return out, nil
}

func parseGates(s string) map[string]string {
	g := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k != "" {
			g[k] = v
		}
	}
	return g
}

// sortedMinors returns the entries oldest first.
func (c *Catalogue) sortedMinors() []Minor {
	ms := slices.Clone(c.Minors)
	slices.SortFunc(ms, func(a, b Minor) int {
		amaj, amin, _ := splitMinor(a.Minor)
		bmaj, bmin, _ := splitMinor(b.Minor)
		if amaj != bmaj {
			return int(amaj - bmaj)
		}
		return int(amin - bmin)
	})
	return ms
}
