package kubeversion

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Kinds of refusal (errors.Is on a refusal.Refusal or a Violation's Kind).
var (
	ErrNotInCatalogue   = errors.New("kubernetes version not in the catalogue")
	ErrSkippedMinor     = errors.New("kubernetes upgrade skips a minor")
	ErrKubeletTooOld    = errors.New("kubelet too old for the target")
	ErrRemovedAPIStored = errors.New("objects stored in an API version the target removes")
	ErrDowngrade        = errors.New("kubernetes target older than what runs")
	ErrSkew             = errors.New("components outside the version skew policy")
	ErrUnhealthy        = errors.New("cluster not healthy")
	ErrNothingRuns      = errors.New("no kubernetes component found")
)

// Instance is one component as it runs on one host: a static pod's
// image tag, or a node's kubelet. An empty Version is a component a
// control-plane host should run and does not (no mirror pod of it).
type Instance struct {
	Host      string `json:"host"`
	Component string `json:"component"`
	Version   string `json:"version"`
	// Image is the static pod's image; empty for a kubelet.
	Image string `json:"image,omitempty"`
	// Flags are the static pod's command-line flags (--name=value), as
	// its manifest gives them; nil for a kubelet.
	Flags map[string]string `json:"-"`
}

// Violation is one component outside the skew policy, or one that an
// upgrade to a target would put outside it. Message names the host, the
// component and what to do.
type Violation struct {
	Host      string `json:"host"`
	Component string `json:"component"`
	Version   string `json:"version"`
	Message   string `json:"message"`
	// Kind is one of the Err* sentinels.
	Kind error `json:"-"`
}

func (v Violation) Error() string { return v.Message }
func (v Violation) Unwrap() error { return v.Kind }

type parsed struct {
	Instance
	v Semver
}

func parseAll(insts []Instance) ([]parsed, []Violation) {
	var out []parsed
	var bad []Violation
	for _, in := range insts {
		if in.Version == "" {
			bad = append(bad, Violation{Host: in.Host, Component: in.Component, Kind: ErrUnhealthy,
				Message: fmt.Sprintf("host %s: no %s found (no mirror pod of its static pod): start it, or wait until its kubelet registers it", in.Host, in.Component)})
			continue
		}
		v, err := Parse(in.Version)
		if err != nil {
			bad = append(bad, Violation{Host: in.Host, Component: in.Component, Version: in.Version, Kind: ErrSkew,
				Message: fmt.Sprintf("host %s: %s reports version %q, which is not a Kubernetes release version: check what runs there", in.Host, in.Component, in.Version)})
			continue
		}
		out = append(out, parsed{in, v})
	}
	return out, bad
}

func byComponent(ps []parsed, comps ...string) []parsed {
	var out []parsed
	for _, p := range ps {
		for _, c := range comps {
			if p.Component == c {
				out = append(out, p)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].v.Compare(out[j].v) < 0 })
	return out
}

// minorsApart is how many minors a is newer than b (negative when older).
func minorsApart(a, b Semver) int {
	return (a.Major-b.Major)*1000 + a.Minor - b.Minor
}

// CheckSkew checks what runs against Kubernetes' version skew policy
// (kubernetes.io/releases/version-skew-policy): API servers within one
// minor of each other; controller-managers and schedulers never newer
// than any API server and at most one minor older than the newest;
// kubelets never newer than any API server and at most three minors
// older than the newest. Violations come in host order.
func CheckSkew(insts []Instance) []Violation {
	ps, out := parseAll(insts)
	apis := byComponent(ps, APIServer)
	if len(apis) == 0 {
		return out
	}
	oldestAPI, newestAPI := apis[0], apis[len(apis)-1]
	if minorsApart(newestAPI.v, oldestAPI.v) > 1 {
		out = append(out, Violation{Host: oldestAPI.Host, Component: APIServer, Version: oldestAPI.Version, Kind: ErrSkew,
			Message: fmt.Sprintf("host %s: kube-apiserver %s is more than one minor older than kube-apiserver %s on host %s: upgrade it to v%d.%d first",
				oldestAPI.Host, oldestAPI.Version, newestAPI.Version, newestAPI.Host, newestAPI.v.Major, newestAPI.v.Minor-1)})
	}
	for _, p := range byComponent(ps, ControllerManager, Scheduler, Kubelet) {
		maxOlder := 1
		if p.Component == Kubelet {
			maxOlder = 3
		}
		switch {
		case minorsApart(p.v, oldestAPI.v) > 0:
			out = append(out, Violation{Host: p.Host, Component: p.Component, Version: p.Version, Kind: ErrSkew,
				Message: fmt.Sprintf("host %s: %s %s is newer than kube-apiserver %s on host %s: upgrade every API server first",
					p.Host, p.Component, p.Version, oldestAPI.Version, oldestAPI.Host)})
		case minorsApart(newestAPI.v, p.v) > maxOlder:
			out = append(out, Violation{Host: p.Host, Component: p.Component, Version: p.Version, Kind: ErrSkew,
				Message: fmt.Sprintf("host %s: %s %s is more than %s older than kube-apiserver %s on host %s: upgrade it to v%d.%d or newer",
					p.Host, p.Component, p.Version, minors(maxOlder), newestAPI.Version, newestAPI.Host, newestAPI.v.Major, newestAPI.v.Minor-maxOlder)})
		}
	}
	sortViolations(out)
	return out
}

func minors(n int) string {
	if n == 1 {
		return "one minor"
	}
	return fmt.Sprintf("%s minors", map[int]string{2: "two", 3: "three"}[n])
}

func sortViolations(vs []Violation) {
	sort.SliceStable(vs, func(i, j int) bool {
		if vs[i].Host != vs[j].Host {
			return vs[i].Host < vs[j].Host
		}
		return componentIndex(vs[i].Component) < componentIndex(vs[j].Component)
	})
}

func componentIndex(c string) int {
	for i, x := range Components {
		if x == c {
			return i
		}
	}
	return len(Components)
}

// Path is the releases an upgrade from from to target goes through, one
// per minor: the newest known release of each minor after from's, then
// target. A minor the catalogue lacks is named "v1.N (not in the
// catalogue)".
func Path(from, target Semver) []string {
	var out []string
	for m := from.Minor + 1; m < target.Minor; m++ {
		if v, ok := NewestOfMinor(target.Major, m); ok {
			out = append(out, v.Version)
		} else {
			out = append(out, fmt.Sprintf("v%d.%d (not in the catalogue)", target.Major, m))
		}
	}
	if from.Compare(target) < 0 {
		out = append(out, target.String())
	}
	return out
}

// CheckTarget checks an upgrade of what runs to target: nothing goes
// backwards (ErrDowngrade), no minor is skipped (ErrSkippedMinor: the
// API servers move one minor at a time, and the controller-managers and
// schedulers may not fall more than one minor behind them), and every
// kubelet is within three minors of the target (ErrKubeletTooOld: the
// kubelets move after the control plane, so the target's API servers
// serve the old kubelets first).
func CheckTarget(insts []Instance, target Semver) []Violation {
	ps, out := parseAll(insts)
	// One downgrade violation, of the newest component (the first of
	// them in host order): the target must be at least that.
	var newest *parsed
	for i := range ps {
		if ps[i].v.Compare(target) > 0 && (newest == nil || ps[i].v.Compare(newest.v) > 0) {
			newest = &ps[i]
		}
	}
	if p := newest; p != nil {
		out = append(out, Violation{Host: p.Host, Component: p.Component, Version: p.Version, Kind: ErrDowngrade,
			Message: fmt.Sprintf("host %s: %s runs %s, newer than the target %s: an upgrade never goes backwards; pick a target of %s or newer",
				p.Host, p.Component, p.Version, target, p.Version)})
	}
	// One skipped-minor violation, of the oldest control-plane component
	// (byComponent sorts oldest first): the path starts there.
	if cp := byComponent(ps, APIServer, ControllerManager, Scheduler); len(cp) > 0 && minorsApart(target, cp[0].v) > 1 {
		p := cp[0]
		path := Path(p.v, target)
		out = append(out, Violation{Host: p.Host, Component: p.Component, Version: p.Version, Kind: ErrSkippedMinor,
			Message: fmt.Sprintf("host %s: %s %s to %s skips a minor: upgrade through each minor in turn (%s), planning %s first",
				p.Host, p.Component, p.Version, target, strings.Join(path, " then "), path[0])})
	}
	for _, p := range byComponent(ps, Kubelet) {
		if minorsApart(target, p.v) > 3 {
			out = append(out, Violation{Host: p.Host, Component: Kubelet, Version: p.Version, Kind: ErrKubeletTooOld,
				Message: fmt.Sprintf("host %s: kubelet %s is more than three minors older than the target %s: upgrade that host's kubelet to v%d.%d or newer first",
					p.Host, p.Version, target, target.Major, target.Minor-3)})
		}
	}
	sortViolations(out)
	return out
}
