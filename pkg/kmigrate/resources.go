package kmigrate

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/etcd-steward/steward/internal/editdist"
)

// Resource is an API resource as discovery describes it, in the version
// the migration's requests use (the group's preferred version).
type Resource struct {
	Group      string   `json:"group"`
	Version    string   `json:"version"`
	Resource   string   `json:"resource"` // plural: configmaps
	Kind       string   `json:"kind"`
	Namespaced bool     `json:"namespaced"`
	Verbs      []string `json:"verbs,omitempty"`
	Singular   string   `json:"singular,omitempty"`
	ShortNames []string `json:"shortNames,omitempty"`
	// StorageVersionHash is discovery's opaque hash of the version the
	// API server stores the resource in; empty for resources it does not
	// store itself (aggregated APIs).
	StorageVersionHash string `json:"storageVersionHash,omitempty"`
}

// Name is kubectl's name of the resource: the plural, followed by the
// group when there is one (configmaps, deployments.apps,
// widgets.example.com).
func (r Resource) Name() string {
	if r.Group == "" {
		return r.Resource
	}
	return r.Resource + "." + r.Group
}

// GroupVersion is the API version the requests use.
func (r Resource) GroupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: r.Group, Version: r.Version}
}

// Migratable reports whether the API server allows what a migration does
// on the resource: list, get and update.
func (r Resource) Migratable() bool {
	return slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "update") && slices.Contains(r.Verbs, "get")
}

// apiPath is the path of the resource's group version: /api/v1 or
// /apis/GROUP/VERSION.
func (r Resource) apiPath() string {
	if r.Group == "" {
		return "/api/" + r.Version
	}
	return "/apis/" + r.Group + "/" + r.Version
}

// ResourcesFrom turns discovery's resource lists (one per group version,
// as ServerPreferredResources returns them) into resources, leaving out
// subresources (pods/status).
func ResourcesFrom(lists []*metav1.APIResourceList) []Resource {
	var out []Resource
	for _, l := range lists {
		if l == nil {
			continue
		}
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, ar := range l.APIResources {
			if strings.Contains(ar.Name, "/") {
				continue
			}
			g, v := gv.Group, gv.Version
			if ar.Group != "" {
				g = ar.Group
			}
			if ar.Version != "" {
				v = ar.Version
			}
			out = append(out, Resource{
				Group: g, Version: v, Resource: ar.Name, Kind: ar.Kind, Namespaced: ar.Namespaced,
				Verbs: append([]string(nil), ar.Verbs...), Singular: ar.SingularName,
				ShortNames: append([]string(nil), ar.ShortNames...), StorageVersionHash: ar.StorageVersionHash,
			})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// expiring are resources whose objects expire by themselves (events live
// an hour): rewriting them costs as much as anything else and they are
// gone before long. --all leaves them out; name them to migrate them.
var expiring = map[string]bool{
	"events":               true,
	"events.events.k8s.io": true, // the same storage as events
}

// Excluded is a resource --all leaves out, and why.
type Excluded struct {
	Resource string `json:"resource"`
	Reason   string `json:"reason"`
}

// SelectAll returns the resources --all migrates, sorted by name: every
// resource the API server stores itself (it has a storageVersionHash) and
// allows list, get and update on, except events. The others are returned
// with the reason they are left out.
func SelectAll(all []Resource) ([]Resource, []Excluded) {
	var sel []Resource
	var ex []Excluded
	for _, r := range all {
		switch {
		case !r.Migratable():
			// create-only and read-only resources (tokenreviews, bindings,
			// componentstatuses): nothing stored to rewrite.
			continue
		case r.StorageVersionHash == "":
			ex = append(ex, Excluded{r.Name(), "no storageVersionHash in discovery: not stored by this API server (aggregated API)"})
		case expiring[r.Name()]:
			ex = append(ex, Excluded{r.Name(), "events expire after an hour; name them with --resources to migrate them"})
		default:
			sel = append(sel, r)
		}
	}
	return sel, ex
}

// Select resolves resource names as kubectl does: a plural, singular or
// short name, optionally followed by .GROUP (configmaps, cm,
// deployments.apps, widgets.example.com). A name without a group matches
// the core group first, then any single group. Every name that matches
// nothing, matches several groups or names a resource that cannot be
// migrated is reported in one error, with close matches.
func Select(all []Resource, names []string) ([]Resource, error) {
	var sel []Resource
	var problems []string
	seen := map[string]bool{}
	for _, raw := range names {
		n := strings.ToLower(strings.TrimSpace(raw))
		if n == "" {
			continue
		}
		m := match(all, n)
		switch {
		case len(m) == 0:
			p := fmt.Sprintf("unknown resource %q", raw)
			if c := closeMatches(all, n); len(c) > 0 {
				p += " (did you mean " + strings.Join(c, ", ") + "?)"
			}
			problems = append(problems, p)
		case len(m) > 1:
			var alts []string
			for _, r := range m {
				alts = append(alts, r.Name())
			}
			problems = append(problems, fmt.Sprintf("%q is served by several groups: name one of %s", raw, strings.Join(alts, ", ")))
		case !m[0].Migratable():
			problems = append(problems, fmt.Sprintf("%s cannot be migrated: the API server allows only %s on it (a migration needs list, get and update)",
				m[0].Name(), strings.Join(m[0].Verbs, ", ")))
		case !seen[m[0].Name()]:
			seen[m[0].Name()] = true
			sel = append(sel, m[0])
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s; nothing was migrated (kubectl api-resources lists the resources the API server serves)", strings.Join(problems, "; "))
	}
	return sel, nil
}

// match returns the resources a lower-case name designates.
func match(all []Resource, n string) []Resource {
	names := func(r Resource) []string {
		return append([]string{r.Resource, r.Singular, strings.ToLower(r.Kind)}, r.ShortNames...)
	}
	has := func(r Resource, s string) bool { return s != "" && slices.Contains(names(r), s) }
	// NAME.GROUP: the first dot separates the name from the group.
	if i := strings.IndexByte(n, '.'); i > 0 {
		name, group := n[:i], n[i+1:]
		var out []Resource
		for _, r := range all {
			if r.Group == group && has(r, name) {
				out = append(out, r)
			}
		}
		if len(out) > 0 {
			return out[:1]
		}
	}
	var core, other []Resource
	for _, r := range all {
		if !has(r, n) {
			continue
		}
		if r.Group == "" {
			core = append(core, r)
		} else {
			other = append(other, r)
		}
	}
	if len(core) > 0 {
		return core[:1]
	}
	// One resource per group: a plural beats a short name.
	byGroup := map[string]Resource{}
	for _, r := range other {
		if old, ok := byGroup[r.Group]; !ok || (r.Resource == n && old.Resource != n) {
			byGroup[r.Group] = r
		}
	}
	var out []Resource
	for _, r := range byGroup {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// closeMatches returns up to five resource names close to n: within a
// small edit distance of the name or of its plural, or sharing a prefix
// of four or more letters with it.
func closeMatches(all []Resource, n string) []string {
	type cand struct {
		name string
		d    int
	}
	base := n
	if i := strings.IndexByte(n, '.'); i > 0 {
		base = n[:i]
	}
	limit := max(2, len(base)/3)
	best := map[string]int{}
	for _, r := range all {
		d := min(editdist.Distance(n, r.Name()), editdist.Distance(base, r.Resource))
		if d > limit && !(len(base) >= 4 && (strings.HasPrefix(r.Resource, base) || strings.HasPrefix(base, r.Resource))) {
			continue
		}
		if old, ok := best[r.Name()]; !ok || d < old {
			best[r.Name()] = d
		}
	}
	var cs []cand
	for name, d := range best {
		cs = append(cs, cand{name, d})
	}
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].d != cs[j].d {
			return cs[i].d < cs[j].d
		}
		return cs[i].name < cs[j].name
	})
	var out []string
	for i := 0; i < len(cs) && i < 5; i++ {
		out = append(out, cs[i].name)
	}
	return out
}
