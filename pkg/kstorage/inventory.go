package kstorage

import (
	"sort"
)

// Inventory aggregates stored objects per resource: objects and bytes per
// stored API version, kind and format, and per encryption provider and key.
// Its memory grows with the number of distinct resources and versions,
// never with the number of objects. It is not safe for concurrent use.
type Inventory struct {
	prefix    string
	resources map[string]*resourceAcc
	other     Count
}

type resourceAcc struct {
	versions  map[versionKey]*Count
	encrypted map[encKey]*Count
}

type versionKey struct {
	apiVersion, kind string
	format           Format
}

type encKey struct {
	provider, prefixVersion, keyName string
}

// Count is a number of objects (or keys) and the bytes of their values.
type Count struct {
	// Objects is the number of objects or keys.
	Objects int64 `json:"objects"`
	// Bytes is the size of their values.
	Bytes int64 `json:"bytes"`
}

func (c *Count) add(n int) {
	c.Objects++
	c.Bytes += int64(n)
}

// NewInventory returns an empty inventory of the keys under prefix
// (normalized with NormalizePrefix).
func NewInventory(prefix string) *Inventory {
	return &Inventory{prefix: NormalizePrefix(prefix), resources: map[string]*resourceAcc{}}
}

// Prefix is the key prefix the inventory counts (without trailing slash).
func (inv *Inventory) Prefix() string { return inv.prefix }

// Add counts one live key and its value. Keys outside the prefix are
// ignored; keys inside it that are not laid out as objects are counted as
// other keys. It reports whether the key was under the prefix.
func (inv *Inventory) Add(key, value []byte) bool {
	if !inPrefix(inv.prefix, key) {
		return false
	}
	path, _, _, ok := parseKey(inv.prefix, key)
	if !ok {
		inv.other.add(len(value))
		return true
	}
	r := inv.resources[string(path)] // no allocation for the lookup
	if r == nil {
		r = &resourceAcc{versions: map[versionKey]*Count{}, encrypted: map[encKey]*Count{}}
		inv.resources[string(path)] = r
	}
	e, av, k := decode(value)
	if e.Format == FormatEncrypted {
		ek := encKey{e.Provider, e.PrefixVersion, e.KeyName}
		c := r.encrypted[ek]
		if c == nil {
			c = &Count{}
			r.encrypted[ek] = c
		}
		c.add(len(value))
		return true
	}
	// A resource has a handful of stored versions: find its counter
	// without converting apiVersion and kind to strings.
	if len(r.versions) <= 8 {
		for vk, c := range r.versions {
			if vk.format == e.Format && vk.apiVersion == string(av) && vk.kind == string(k) {
				c.add(len(value))
				return true
			}
		}
	}
	vk := versionKey{string(av), string(k), e.Format}
	c := r.versions[vk]
	if c == nil {
		c = &Count{}
		r.versions[vk] = c
	}
	c.add(len(value))
	return true
}

func inPrefix(prefix string, key []byte) bool {
	return len(key) > len(prefix) && string(key[:len(prefix)]) == prefix && key[len(prefix)] == '/'
}

// Report is an inventory's result. Its JSON field names are stable.
type Report struct {
	// Source says what was read.
	Source Source `json:"source"`
	// Prefix is the key prefix read, e.g. "/registry".
	Prefix string `json:"prefix"`
	// Resources are sorted by resource name.
	Resources []ResourceReport `json:"resources"`
	// OtherKeys counts keys under the prefix that are not laid out as
	// objects (PREFIX/health, say).
	OtherKeys Count `json:"otherKeys"`
	// Totals add up every resource.
	Totals Totals `json:"totals"`
	// RemovedAPIs is set by CheckRemoved (with --kubernetes-version).
	RemovedAPIs *RemovedCheck `json:"removedAPIs,omitempty"`
	// Notes say what the figures do not cover (deltas past a gap, say).
	Notes []string `json:"notes,omitempty"`
}

// Source describes what an inventory read.
type Source struct {
	// Type is "cluster", "snapshot" or "backup".
	Type string `json:"type"`
	// Cluster is the cluster's name (cluster and backup sources).
	Cluster string `json:"cluster,omitempty"`
	// Path is the snapshot file (snapshot source).
	Path string `json:"path,omitempty"`
	// BackupID is the full backup read (backup source).
	BackupID string `json:"backupID,omitempty"`
	// Revision is the etcd revision the inventory shows.
	Revision int64 `json:"revision"`
	// CompactRevision is the revision the database was last compacted at
	// (snapshot and backup sources; 0 when never).
	CompactRevision int64 `json:"compactRevision,omitempty"`
	// FullRevision is the full backup's revision; DeltasApplied the delta
	// segments replayed on it to reach Revision (backup source).
	FullRevision  int64 `json:"fullRevision,omitempty"`
	DeltasApplied int   `json:"deltasApplied,omitempty"`
}

// ResourceReport is one resource's stored objects.
type ResourceReport struct {
	// Resource is kubectl's name of the resource ("configmaps",
	// "widgets.example.com"); Path its part of the storage key
	// ("services/specs", "example.com/widgets").
	Resource string `json:"resource"`
	Path     string `json:"path"`
	// Objects and Bytes (of values) of every object of the resource.
	Objects int64 `json:"objects"`
	Bytes   int64 `json:"bytes"`
	// PlainObjects are stored unencrypted, EncryptedObjects encrypted.
	PlainObjects     int64 `json:"plainObjects"`
	EncryptedObjects int64 `json:"encryptedObjects"`
	// Versions count the unencrypted objects per stored API version, kind
	// and format; always an array.
	Versions []VersionReport `json:"versions"`
	// Encryption counts the encrypted objects per provider and key; always
	// an array.
	Encryption []EncryptionReport `json:"encryption"`
}

// VersionReport counts the objects of one stored API version and kind.
type VersionReport struct {
	// APIVersion and Kind as stored; empty when the value does not say
	// (format unknown).
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Format is protobuf, json, cbor or unknown.
	Format Format `json:"format"`
	// Objects and Bytes (of values) stored in this version.
	Objects int64 `json:"objects"`
	Bytes   int64 `json:"bytes"`
	// RemovedIn and Replacement are set by CheckRemoved when the checked
	// Kubernetes version no longer serves APIVersion for Kind.
	RemovedIn   string `json:"removedIn,omitempty"`
	Replacement string `json:"replacement,omitempty"`
}

// EncryptionReport counts the objects encrypted under one key.
type EncryptionReport struct {
	// Provider is aescbc, aesgcm, secretbox or kms; PrefixVersion the
	// prefix's version (v1; v2 for KMS v2); KeyName the key's name (the KMS
	// plugin's name for kms).
	Provider      string `json:"provider"`
	PrefixVersion string `json:"prefixVersion"`
	KeyName       string `json:"keyName"`
	// Objects and Bytes (of values) encrypted under this key.
	Objects int64 `json:"objects"`
	Bytes   int64 `json:"bytes"`
}

// Totals add up an inventory's resources (other keys not included).
type Totals struct {
	// Resources is the number of resources with objects.
	Resources int `json:"resources"`
	// Objects and Bytes of every resource.
	Objects int64 `json:"objects"`
	Bytes   int64 `json:"bytes"`
	// PlainObjects and EncryptedObjects split Objects.
	PlainObjects     int64 `json:"plainObjects"`
	EncryptedObjects int64 `json:"encryptedObjects"`
}

// Report returns the inventory, sorted, for src.
func (inv *Inventory) Report(src Source) Report {
	rep := Report{Source: src, Prefix: inv.prefix, Resources: []ResourceReport{}, OtherKeys: inv.other}
	for path, acc := range inv.resources {
		r := ResourceReport{Resource: resourceName(path), Path: path, Versions: []VersionReport{}, Encryption: []EncryptionReport{}}
		for vk, c := range acc.versions {
			r.Versions = append(r.Versions, VersionReport{APIVersion: vk.apiVersion, Kind: vk.kind, Format: vk.format, Objects: c.Objects, Bytes: c.Bytes})
			r.PlainObjects += c.Objects
			r.Bytes += c.Bytes
		}
		for ek, c := range acc.encrypted {
			r.Encryption = append(r.Encryption, EncryptionReport{Provider: ek.provider, PrefixVersion: ek.prefixVersion, KeyName: ek.keyName, Objects: c.Objects, Bytes: c.Bytes})
			r.EncryptedObjects += c.Objects
			r.Bytes += c.Bytes
		}
		r.Objects = r.PlainObjects + r.EncryptedObjects
		sort.Slice(r.Versions, func(i, j int) bool {
			a, b := r.Versions[i], r.Versions[j]
			if a.APIVersion != b.APIVersion {
				return a.APIVersion < b.APIVersion
			}
			if a.Kind != b.Kind {
				return a.Kind < b.Kind
			}
			return a.Format < b.Format
		})
		sort.Slice(r.Encryption, func(i, j int) bool {
			a, b := r.Encryption[i], r.Encryption[j]
			if a.Provider != b.Provider {
				return a.Provider < b.Provider
			}
			if a.PrefixVersion != b.PrefixVersion {
				return a.PrefixVersion < b.PrefixVersion
			}
			return a.KeyName < b.KeyName
		})
		rep.Resources = append(rep.Resources, r)
		rep.Totals.Objects += r.Objects
		rep.Totals.Bytes += r.Bytes
		rep.Totals.PlainObjects += r.PlainObjects
		rep.Totals.EncryptedObjects += r.EncryptedObjects
	}
	sort.Slice(rep.Resources, func(i, j int) bool {
		a, b := rep.Resources[i], rep.Resources[j]
		if a.Resource != b.Resource {
			return a.Resource < b.Resource
		}
		return a.Path < b.Path
	})
	rep.Totals.Resources = len(rep.Resources)
	return rep
}
