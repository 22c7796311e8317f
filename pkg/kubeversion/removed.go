package kubeversion

import (
	"fmt"

	"github.com/etcd-steward/steward/pkg/kstorage"
)

// RemovedAPI is an API version of a resource that a release no longer
// serves: an object still stored in it cannot be read by that release's
// API servers.
type RemovedAPI struct {
	Group    string `json:"group"` // "" for the core group
	Version  string `json:"version"`
	Resource string `json:"resource"`
	Kind     string `json:"kind"`
	// RemovedIn is the first minor that does not serve it ("1.36").
	RemovedIn   string `json:"removedIn"`
	Replacement string `json:"replacement"`
}

// APIVersion is GROUP/VERSION, or VERSION for the core group.
func (r RemovedAPI) APIVersion() string {
	if r.Group == "" {
		return r.Version
	}
	return r.Group + "/" + r.Version
}

// removed are the API versions the known releases (and the minor before
// the oldest) stopped serving, read from the k8s.io/api module of each
// release: a group version whose package is gone, or whose
// zz_generated.prerelease-lifecycle.go APILifecycleRemoved returns that
// minor. Older removals are kstorage's catalogue (removed-apis.yaml, the
// deprecation guide's); Catalogue merges both.
var removed = []RemovedAPI{
	// k8s.io/api v0.36.3 has no scheduling/v1alpha1 (v0.35.4 has it, with
	// PriorityClass and the alpha Workload); Workload moved to v1alpha2.
	{Group: "scheduling.k8s.io", Version: "v1alpha1", Resource: "priorityclasses", Kind: "PriorityClass", RemovedIn: "1.36", Replacement: "scheduling.k8s.io/v1"},
	{Group: "scheduling.k8s.io", Version: "v1alpha1", Resource: "workloads", Kind: "Workload", RemovedIn: "1.36", Replacement: "scheduling.k8s.io/v1alpha2"},
	// k8s.io/api v0.35.4 storage/v1alpha1: VolumeAttributesClass
	// APILifecycleRemoved() = 1, 35.
	{Group: "storage.k8s.io", Version: "v1alpha1", Resource: "volumeattributesclasses", Kind: "VolumeAttributesClass", RemovedIn: "1.35", Replacement: "storage.k8s.io/v1"},
	// k8s.io/api v0.35.4 has no storagemigration/v1alpha1 (v0.34.1 has
	// it); its successor is v1beta1.
	{Group: "storagemigration.k8s.io", Version: "v1alpha1", Resource: "storageversionmigrations", Kind: "StorageVersionMigration", RemovedIn: "1.35", Replacement: "storagemigration.k8s.io/v1beta1"},
}

// Removed returns the removal table (a copy).
func Removed() []RemovedAPI {
	out := make([]RemovedAPI, len(removed))
	copy(out, removed)
	return out
}

// Catalogue is base (kstorage's catalogue: the embedded one or the
// Steward directory's override) with this package's removals added, for
// kstorage.Report.CheckRemoved. An entry base already has for the same
// API version and kind is kept as base says.
func Catalogue(base *kstorage.RemovedCatalogue) *kstorage.RemovedCatalogue {
	c := &kstorage.RemovedCatalogue{APIVersion: base.APIVersion, Kind: base.Kind}
	c.Removed = append(c.Removed, base.Removed...)
	for _, r := range removed {
		if _, ok := base.Lookup(r.APIVersion(), r.Kind); ok {
			continue
		}
		c.Removed = append(c.Removed, kstorage.RemovedAPI{APIVersion: r.APIVersion(), Kinds: []string{r.Kind}, RemovedIn: r.RemovedIn, Replacement: r.Replacement})
	}
	return c
}

// RemovedBetween lists the removals an upgrade from one minor to another
// crosses: removed after from's minor, in to's or before.
func RemovedBetween(from, to Semver, cat *kstorage.RemovedCatalogue) []kstorage.RemovedAPI {
	var out []kstorage.RemovedAPI
	for _, r := range cat.Removed {
		maj, min, err := kstorage.ParseMinor(r.RemovedIn)
		if err != nil {
			continue
		}
		v := Semver{maj, min, 0}
		if v.Compare(Semver{from.Major, from.Minor, 0}) > 0 && v.Compare(Semver{to.Major, to.Minor, 0}) <= 0 {
			out = append(out, r)
		}
	}
	return out
}

// describeUse is one stored removed API in words.
func describeUse(u kstorage.RemovedUse) string {
	return fmt.Sprintf("%d %s stored as %s (removed in %s; use %s)", u.Objects, u.Resource, u.APIVersion, u.RemovedIn, u.Replacement)
}
