// Package catalogue is Steward's knowledge of etcd versions: which minor
// lines may upgrade to which, the minimum patch to reach before leaving a
// minor, where etcd's online downgrade exists, and the flags each minor
// renamed or removed. The data ships embedded (catalogue.yaml) and an
// operator may override it with a file of the same shape, so a new etcd
// release needs no code change.
package catalogue

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/coreos/go-semver/semver"
	"sigs.k8s.io/yaml"
)

//go:embed catalogue.yaml
var embedded []byte

// FileName is the override file's name in the Steward directory.
const FileName = "catalogue.yaml"

// Catalogue lists what Steward knows about each etcd minor line.
type Catalogue struct {
	APIVersion string  `json:"apiVersion"`
	Kind       string  `json:"kind"`
	Minors     []Minor `json:"minors"`
}

// Minor describes one etcd minor line, e.g. "3.6".
type Minor struct {
	Minor string `json:"minor"`
	// Latest is the newest patch release Steward knows of this line. Plans
	// pass through it when the line is an intermediate step.
	Latest string `json:"latest"`
	// UpgradeFrom lists the minor lines that may upgrade to this one.
	UpgradeFrom []string `json:"upgradeFrom,omitempty"`
	// MinimumFrom is, per minor line in UpgradeFrom, the lowest patch a
	// member must run before it moves to this line.
	MinimumFrom map[string]string `json:"minimumFrom,omitempty"`
	// DowngradeTo lists the minor lines this one may go back to.
	DowngradeTo []string `json:"downgradeTo,omitempty"`
	// OnlineDowngrade is true when etcd's downgrade API (validate,
	// enable, swap binaries) takes this line back to DowngradeTo.
	OnlineDowngrade bool `json:"onlineDowngrade,omitempty"`
	// RenamedFlags maps flags this line renamed: old name to new name.
	RenamedFlags map[string]string `json:"renamedFlags,omitempty"`
	// FeatureGateFlags maps --experimental-* flags that this line turned
	// into --feature-gates entries: flag name to gate name.
	FeatureGateFlags map[string]string `json:"featureGateFlags,omitempty"`
	// RemovedFlags are flags this line no longer accepts.
	RemovedFlags []string `json:"removedFlags,omitempty"`
	// SnapshotBeforeUpgrade says a member must take a raft snapshot on the
	// previous line before it moves to this one: this line cannot replay
	// WAL entries that older lines wrote.
	SnapshotBeforeUpgrade bool `json:"snapshotBeforeUpgrade,omitempty"`
}

// Default returns the catalogue shipped with Steward.
func Default() *Catalogue {
	c, err := Parse(embedded)
	if err != nil {
		panic(fmt.Sprintf("embedded version catalogue: %v", err)) // caught by TestDefaultCatalogue
	}
	return c
}

// Load returns the catalogue in path when that file exists, else the
// embedded one.
func Load(path string) (*Catalogue, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Default(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("version catalogue: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("version catalogue %s: %w", path, err)
	}
	return c, nil
}

// Parse reads and checks a catalogue.
func Parse(b []byte) (*Catalogue, error) {
	var c Catalogue
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, err
	}
	if c.Kind != "VersionCatalogue" {
		return nil, fmt.Errorf("kind %q: want VersionCatalogue", c.Kind)
	}
	seen := map[string]bool{}
	for _, m := range c.Minors {
		if _, _, err := splitMinor(m.Minor); err != nil {
			return nil, fmt.Errorf("minor %q: want MAJOR.MINOR", m.Minor)
		}
		if seen[m.Minor] {
			return nil, fmt.Errorf("minor %s listed twice", m.Minor)
		}
		seen[m.Minor] = true
		lv, err := semver.NewVersion(m.Latest)
		if err != nil || MinorOf(lv) != m.Minor {
			return nil, fmt.Errorf("minor %s: latest %q is not a %s.x version", m.Minor, m.Latest, m.Minor)
		}
		for from, min := range m.MinimumFrom {
			mv, err := semver.NewVersion(min)
			if err != nil || MinorOf(mv) != from || !slices.Contains(m.UpgradeFrom, from) {
				return nil, fmt.Errorf("minor %s: minimumFrom %s: %q must be a %s.x version of a line in upgradeFrom", m.Minor, from, min, from)
			}
		}
	}
	return &c, nil
}

// Minor returns the entry of a minor line ("3.6").
func (c *Catalogue) Minor(minor string) (Minor, bool) {
	for _, m := range c.Minors {
		if m.Minor == minor {
			return m, true
		}
	}
	return Minor{}, false
}

// MinorOf returns "MAJOR.MINOR" of a version.
func MinorOf(v *semver.Version) string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

func splitMinor(s string) (major, minor int64, err error) {
	v, err := semver.NewVersion(s + ".0")
	if err != nil {
		return 0, 0, err
	}
	return v.Major, v.Minor, nil
}

func minorString(major, minor int64) string { return fmt.Sprintf("%d.%d", major, minor) }
