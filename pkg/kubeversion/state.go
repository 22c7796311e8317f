package kubeversion

import (
	"slices"
	"sort"
)

// The states of a version, in StarlingX's words
// (../shared/seeds/003: kube-version-list), computed from what runs.
const (
	// StateActive: every component on every host runs it.
	StateActive = "active"
	// StatePartial: some components run it, others another version.
	StatePartial = "partial"
	// StateAvailable: nothing runs it; it is in the catalogue and its
	// images and binaries are present, so it can be upgraded to.
	StateAvailable = "available"
	// StateUnavailable: nothing runs it and something it needs is missing
	// (VersionState.Missing says what).
	StateUnavailable = "unavailable"
)

// VersionState is one version and where it runs.
type VersionState struct {
	Version string `json:"version"`
	State   string `json:"state"`
	// Known: the version is in Steward's catalogue (a version that runs
	// but is not known is listed too, never as a target).
	Known bool `json:"known"`
	// Running counts the components (host and component) that run it, of
	// Components in all.
	Running    int `json:"running"`
	Components int `json:"components"`
	// Hosts are the hosts where at least one component runs it (always an
	// array).
	Hosts []string `json:"hosts"`
	// EtcdVersion is the etcd release the version is tested with; empty
	// for a version not in the catalogue.
	EtcdVersion string `json:"etcdVersion,omitempty"`
	// Missing lists what an unavailable version lacks (images, binaries).
	Missing []string `json:"missing,omitempty"`
}

// States lists every known version and every version running, newest
// first, with its state. missing says what a known version lacks on this
// machine (nil or empty: nothing); it is asked only of versions that do
// not run.
func States(insts []Instance, missing func(Version) []string) []VersionState {
	type acc struct {
		running int
		hosts   []string
	}
	byVersion := map[string]*acc{}
	total := 0
	for _, in := range insts {
		total++ // a component absent or of no version keeps every version from active
		v, err := Parse(in.Version)
		if err != nil {
			continue
		}
		a := byVersion[v.String()]
		if a == nil {
			a = &acc{}
			byVersion[v.String()] = a
		}
		a.running++
		if !slices.Contains(a.hosts, in.Host) {
			a.hosts = append(a.hosts, in.Host)
		}
	}
	var out []VersionState
	seen := map[string]bool{}
	add := func(name string, k Version, isKnown bool) {
		seen[name] = true
		vs := VersionState{Version: name, Known: isKnown, Components: total, Hosts: []string{}, EtcdVersion: k.EtcdVersion}
		if a := byVersion[name]; a != nil {
			vs.Running, vs.Hosts = a.running, a.hosts
			sort.Strings(vs.Hosts)
		}
		switch {
		case vs.Running > 0 && vs.Running == total:
			vs.State = StateActive
		case vs.Running > 0:
			vs.State = StatePartial
		default:
			vs.State = StateAvailable
			if missing != nil {
				if m := missing(k); len(m) > 0 {
					vs.State, vs.Missing = StateUnavailable, m
				}
			}
		}
		out = append(out, vs)
	}
	for _, k := range known {
		add(k.Version, k, true)
	}
	for name := range byVersion {
		if !seen[name] {
			add(name, Version{Version: name}, false)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, _ := Parse(out[i].Version)
		b, _ := Parse(out[j].Version)
		return a.Compare(b) > 0
	})
	return out
}
