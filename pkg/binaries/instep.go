package binaries

import (
	"fmt"
	"slices"
	"sort"
)

// Keeping the stores of several hosts in step: each host's agent lists the
// versions of its store with the SHA-256 its manifests record (Stored),
// and a coordinator compares that list with its own (CompareStores). The
// comparison reads manifests only, so it is cheap enough for every status;
// a file changed after its import is caught by CheckRecorded before it
// runs and by Verify, not here.

// StoredVersion is one version of a store with the SHA-256 of each of its
// files as its manifest records them. Its JSON field names are stable (the
// agent API carries it).
type StoredVersion struct {
	Version string `json:"version"`
	// Files maps a tool (etcd, etcdctl, etcdutl) to its SHA-256; empty
	// when the manifest cannot be read (Problem says why).
	Files   map[string]string `json:"files"`
	Problem string            `json:"problem,omitempty"`
}

// Stored lists the versions in the store (not the embedded version, which
// has no stored copy) with their recorded sums, in ascending order.
func (s *Store) Stored() ([]StoredVersion, error) {
	versions, err := s.storeVersions()
	if err != nil {
		return nil, err
	}
	out := make([]StoredVersion, 0, len(versions))
	for _, v := range versions {
		sv := StoredVersion{Version: v, Files: map[string]string{}}
		m, err := readManifest(s.versionDir(v))
		switch {
		case err != nil:
			sv.Problem = err.Error()
		case m.Files[toolEtcd] == "":
			sv.Problem = fmt.Sprintf("the manifest of etcd %s lists no etcd", v)
		default:
			sv.Files = m.Files
		}
		out = append(out, sv)
	}
	return out, nil
}

// StoreDiff is how a host's store differs from the reference store (the
// coordinator's). Its JSON field names are stable.
type StoreDiff struct {
	// Lacking are versions the host's store does not hold: every version
	// of the reference store and the versions required (the spec's).
	Lacking []string `json:"lacking,omitempty"`
	// Different are versions the host holds with another SHA-256 than the
	// reference for a file both hold (another build under the same
	// version), or whose manifest the host cannot read.
	Different []string `json:"different,omitempty"`
}

// InStep reports whether the host's store holds everything the reference
// does, the same way.
func (d StoreDiff) InStep() bool { return len(d.Lacking) == 0 && len(d.Different) == 0 }

// CompareStores compares a host's store with the reference store. required
// are versions the host must hold even when the reference has no stored
// copy (the spec's version; leave out the embedded version, which every
// steward binary carries). Versions only the host holds are not reported.
// A reference version whose own manifest is unreadable is not compared
// (the reference's Verify reports it). The lists are in ascending order.
func CompareStores(ref []StoredVersion, required []string, host []StoredVersion) StoreDiff {
	hv := map[string]StoredVersion{}
	for _, h := range host {
		hv[h.Version] = h
	}
	var d StoreDiff
	seen := map[string]bool{}
	for _, r := range ref {
		seen[r.Version] = true
		h, ok := hv[r.Version]
		switch {
		case !ok:
			d.Lacking = append(d.Lacking, r.Version)
		case r.Problem != "":
		case h.Problem != "" || h.Files[toolEtcd] == "":
			d.Different = append(d.Different, r.Version)
		default:
			for tool, sum := range r.Files {
				if hs, ok := h.Files[tool]; ok && hs != sum {
					d.Different = append(d.Different, r.Version)
					break
				}
			}
		}
	}
	for _, v := range required {
		if v == "" || seen[v] {
			continue
		}
		seen[v] = true
		if _, ok := hv[v]; !ok {
			d.Lacking = append(d.Lacking, v)
		}
	}
	order := func(vs []string) {
		sort.Slice(vs, func(i, j int) bool { return lessVersion(vs[i], vs[j]) })
	}
	order(d.Lacking)
	d.Different = slices.Compact(d.Different)
	order(d.Different)
	return d
}
