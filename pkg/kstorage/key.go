package kstorage

import (
	"bytes"
	"strings"
)

// DefaultPrefix is kube-apiserver's default --etcd-prefix.
const DefaultPrefix = "/registry"

// Key is what a storage key says about the object stored under it.
//
// kube-apiserver stores an object at PREFIX/RESOURCE/NAMESPACE/NAME, or
// PREFIX/RESOURCE/NAME when the resource is cluster-scoped. RESOURCE is
// the plural resource name, except for a few built-ins that kept their
// historical paths (nodes under minions, services under services/specs,
// endpoints under services/endpoints, replication controllers under
// controllers, ingresses under ingress, pod security policies under
// podsecuritypolicy), and except for custom resources and the
// apiextensions.k8s.io and apiregistration.k8s.io groups, which are stored
// under GROUP/RESOURCE. Resources of one group share a path across API
// versions and groups (events and events.k8s.io events share events).
type Key struct {
	// Resource names the resource as kubectl does: "configmaps",
	// "services", "apiservices.apiregistration.k8s.io",
	// "widgets.example.com".
	Resource string
	// Path is the resource's part of the key: "configmaps",
	// "services/specs", "apiregistration.k8s.io/apiservices",
	// "example.com/widgets".
	Path string
	// Namespace is empty for cluster-scoped objects.
	Namespace string
	// Name is the object's name.
	Name string
}

// historicalPaths maps the storage paths of built-in resources whose path
// is not their resource name (kube-apiserver's
// SpecialDefaultResourcePrefixes) to the resource.
var historicalPaths = map[string]string{
	"controllers":        "replicationcontrollers",
	"minions":            "nodes",
	"services/specs":     "services",
	"services/endpoints": "endpoints",
	"ingress":            "ingresses",
	"podsecuritypolicy":  "podsecuritypolicies",
}

// NormalizePrefix returns prefix without trailing slashes ("/registry/"
// becomes "/registry"; "/" becomes "", which matches every key that
// starts with a slash).
func NormalizePrefix(prefix string) string {
	return strings.TrimRight(prefix, "/")
}

// ParseKey splits a storage key under prefix (as NormalizePrefix returns
// it) into resource, namespace and name. It returns false for keys outside
// prefix and for keys inside it that are not laid out as objects, such as
// PREFIX/health.
func ParseKey(prefix string, key []byte) (Key, bool) {
	path, ns, name, ok := parseKey(prefix, key)
	if !ok {
		return Key{}, false
	}
	return Key{Resource: resourceName(string(path)), Path: string(path), Namespace: string(ns), Name: string(name)}, true
}

// parseKey is ParseKey returning slices of key.
func parseKey(prefix string, key []byte) (path, ns, name []byte, ok bool) {
	if len(key) <= len(prefix)+1 || string(key[:len(prefix)]) != prefix || key[len(prefix)] != '/' {
		return nil, nil, nil, false
	}
	rest := key[len(prefix)+1:]
	var segs [5][]byte
	n := 0
	for n < len(segs) {
		i := bytes.IndexByte(rest, '/')
		if i < 0 {
			segs[n] = rest
			n++
			break
		}
		segs[n], rest = rest[:i], rest[i+1:]
		n++
		if n == len(segs) { // more segments than any layout has
			return nil, nil, nil, false
		}
	}
	for _, s := range segs[:n] {
		if len(s) == 0 {
			return nil, nil, nil, false
		}
	}
	r := 1 // segments of the resource path
	if n >= 2 && (bytes.IndexByte(segs[0], '.') >= 0 ||
		string(segs[0]) == "services" && (string(segs[1]) == "specs" || string(segs[1]) == "endpoints")) {
		r = 2
	}
	pathLen := len(segs[0])
	if r == 2 {
		pathLen += 1 + len(segs[1])
	}
	path = key[len(prefix)+1 : len(prefix)+1+pathLen]
	switch n - r {
	case 1:
		return path, nil, segs[r], true
	case 2:
		return path, segs[r], segs[r+1], true
	}
	return nil, nil, nil, false
}

// resourceName turns a storage path into kubectl's resource name.
func resourceName(path string) string {
	if r, ok := historicalPaths[path]; ok {
		return r
	}
	if g, r, ok := strings.Cut(path, "/"); ok && strings.Contains(g, ".") {
		return r + "." + g
	}
	return path
}
