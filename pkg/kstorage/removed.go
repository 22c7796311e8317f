package kstorage

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

//go:embed removed-apis.yaml
var embeddedRemoved []byte

// RemovedFileName is the name of the removed-API catalogue's override file
// in the Steward directory.
const RemovedFileName = "removed-apis.yaml"

// RemovedCatalogue lists Kubernetes API versions that stopped being served.
type RemovedCatalogue struct {
	// APIVersion is the file format's version (steward.etcd.io/v1alpha1).
	APIVersion string `json:"apiVersion"`
	// Kind is RemovedAPICatalogue.
	Kind string `json:"kind"`
	// Removed lists the API versions that stopped being served.
	Removed []RemovedAPI `json:"removed"`
}

// RemovedAPI is one API version of some kinds and the Kubernetes version
// that stopped serving it.
type RemovedAPI struct {
	// APIVersion is GROUP/VERSION, or VERSION for the core group.
	APIVersion string `json:"apiVersion"`
	// Kinds are the kinds of APIVersion that were removed.
	Kinds []string `json:"kinds"`
	// RemovedIn is the first Kubernetes minor ("1.25") not serving them.
	RemovedIn string `json:"removedIn"`
	// Replacement says what to use instead, usually an API version.
	Replacement string `json:"replacement"`
}

// DefaultRemoved returns the catalogue shipped with Steward.
func DefaultRemoved() *RemovedCatalogue {
	c, err := ParseRemoved(embeddedRemoved)
	if err != nil {
		panic(fmt.Sprintf("embedded removed-API catalogue: %v", err)) // caught by TestDefaultRemoved
	}
	return c
}

// LoadRemoved returns the catalogue in path when that file exists, else the
// embedded one.
func LoadRemoved(path string) (*RemovedCatalogue, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return DefaultRemoved(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("removed-API catalogue: %w", err)
	}
	c, err := ParseRemoved(b)
	if err != nil {
		return nil, fmt.Errorf("removed-API catalogue %s: %w", path, err)
	}
	return c, nil
}

// ParseRemoved reads and checks a catalogue.
func ParseRemoved(b []byte) (*RemovedCatalogue, error) {
	var c RemovedCatalogue
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, err
	}
	if c.Kind != "RemovedAPICatalogue" {
		return nil, fmt.Errorf("kind %q: want RemovedAPICatalogue", c.Kind)
	}
	seen := map[string]bool{}
	for i, r := range c.Removed {
		if r.APIVersion == "" || strings.Count(r.APIVersion, "/") > 1 {
			return nil, fmt.Errorf("removed[%d]: apiVersion %q: want GROUP/VERSION or VERSION", i, r.APIVersion)
		}
		if len(r.Kinds) == 0 {
			return nil, fmt.Errorf("removed[%d] (%s): no kinds", i, r.APIVersion)
		}
		if _, _, err := ParseMinor(r.RemovedIn); err != nil {
			return nil, fmt.Errorf("removed[%d] (%s): removedIn: %w", i, r.APIVersion, err)
		}
		for _, k := range r.Kinds {
			if k == "" {
				return nil, fmt.Errorf("removed[%d] (%s): empty kind", i, r.APIVersion)
			}
			if seen[r.APIVersion+" "+k] {
				return nil, fmt.Errorf("%s %s is listed twice", r.APIVersion, k)
			}
			seen[r.APIVersion+" "+k] = true
		}
	}
	return &c, nil
}

// Lookup returns the entry that removed apiVersion for kind.
func (c *RemovedCatalogue) Lookup(apiVersion, kind string) (RemovedAPI, bool) {
	for _, r := range c.Removed {
		if r.APIVersion != apiVersion {
			continue
		}
		for _, k := range r.Kinds {
			if k == kind {
				return r, true
			}
		}
	}
	return RemovedAPI{}, false
}

// ParseMinor reads a Kubernetes version ("1.32", "v1.32", "1.32.3",
// "v1.33.0-rc.1") as its major and minor numbers.
func ParseMinor(v string) (major, minor int, err error) {
	s := strings.TrimPrefix(v, "v")
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return 0, 0, fmt.Errorf("version %q: want MAJOR.MINOR, e.g. 1.32", v)
	}
	if len(parts) == 3 {
		patch, _, _ := strings.Cut(parts[2], "-")
		if _, err := strconv.ParseUint(patch, 10, 32); err != nil {
			return 0, 0, fmt.Errorf("version %q: want MAJOR.MINOR[.PATCH], e.g. 1.32", v)
		}
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil || major < 0 || minor < 0 {
		return 0, 0, fmt.Errorf("version %q: want MAJOR.MINOR, e.g. 1.32", v)
	}
	return major, minor, nil
}

// RemovedCheck is the result of CheckRemoved.
type RemovedCheck struct {
	// KubernetesVersion is the version checked against, as MAJOR.MINOR.
	KubernetesVersion string `json:"kubernetesVersion"`
	// Objects is how many objects are stored in API versions that version
	// does not serve; Uses lists them per resource and version (always an
	// array).
	Objects int64        `json:"objects"`
	Uses    []RemovedUse `json:"uses"`
	// UncheckedObjects are encrypted or of unknown format: their API
	// version is not readable without the API server.
	UncheckedObjects int64 `json:"uncheckedObjects"`
}

// RemovedUse is one resource's objects stored in a removed API version.
type RemovedUse struct {
	// Resource is kubectl's name of the resource.
	Resource string `json:"resource"`
	// APIVersion and Kind are the stored, removed, version and kind.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Objects is how many objects are stored so.
	Objects int64 `json:"objects"`
	// RemovedIn and Replacement are the catalogue's.
	RemovedIn   string `json:"removedIn"`
	Replacement string `json:"replacement"`
}

// CheckRemoved flags, in the report, every stored API version that
// Kubernetes version k8sVersion (MAJOR.MINOR[.PATCH]) no longer serves
// according to the catalogue, and sets RemovedAPIs.
func (r *Report) CheckRemoved(c *RemovedCatalogue, k8sVersion string) error {
	major, minor, err := ParseMinor(k8sVersion)
	if err != nil {
		return err
	}
	chk := &RemovedCheck{KubernetesVersion: fmt.Sprintf("%d.%d", major, minor), Uses: []RemovedUse{}}
	for i := range r.Resources {
		res := &r.Resources[i]
		chk.UncheckedObjects += res.EncryptedObjects
		for j := range res.Versions {
			v := &res.Versions[j]
			if v.Format == FormatUnknown || v.APIVersion == "" {
				chk.UncheckedObjects += v.Objects
				continue
			}
			rm, ok := c.Lookup(v.APIVersion, v.Kind)
			if !ok {
				continue
			}
			rmaj, rmin, _ := ParseMinor(rm.RemovedIn)
			if rmaj > major || rmaj == major && rmin > minor {
				continue
			}
			v.RemovedIn, v.Replacement = rm.RemovedIn, rm.Replacement
			chk.Objects += v.Objects
			chk.Uses = append(chk.Uses, RemovedUse{Resource: res.Resource, APIVersion: v.APIVersion, Kind: v.Kind,
				Objects: v.Objects, RemovedIn: rm.RemovedIn, Replacement: rm.Replacement})
		}
	}
	sort.SliceStable(chk.Uses, func(i, j int) bool { return chk.Uses[i].Resource < chk.Uses[j].Resource })
	r.RemovedAPIs = chk
	return nil
}
