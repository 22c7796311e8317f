// Package kstorage reads what Kubernetes stores in etcd without an API
// server: it classifies each value's envelope (protobuf, JSON, CBOR,
// encrypted at rest, unknown), maps keys to resources the way
// kube-apiserver lays them out, and aggregates an inventory of stored API
// versions per resource from a live cluster, a snapshot file or a backup.
// With the catalogue of removed APIs (embedded, overridable) it flags
// objects stored in API versions a Kubernetes version no longer serves.
//
// Memory does not grow with the number of objects: the live scan reads
// pages at one revision, and the snapshot scan remembers only the keys
// changed since the database's last compaction (16 bytes each).
package kstorage

import (
	"bytes"
	"encoding/json"
)

// Format is how a stored value is encoded.
type Format string

// Formats Decode reports.
const (
	// FormatProtobuf is Kubernetes' protobuf envelope: the magic "k8s\x00"
	// followed by a runtime.Unknown message (built-in resources).
	FormatProtobuf Format = "protobuf"
	// FormatJSON is a JSON object (custom resources, and the
	// apiextensions.k8s.io and apiregistration.k8s.io groups).
	FormatJSON Format = "json"
	// FormatCBOR is self-described CBOR (tag 55799, bytes d9 d9 f7), which
	// kube-apiserver writes for custom resources when its alpha feature
	// gate CBORServingAndStorage is on (Kubernetes 1.32 and later).
	FormatCBOR Format = "cbor"
	// FormatEncrypted is a value encrypted at rest: "k8s:enc:" followed by
	// the provider, its prefix version and the key (or KMS plugin) name.
	FormatEncrypted Format = "encrypted"
	// FormatUnknown is anything else, including malformed envelopes.
	FormatUnknown Format = "unknown"
)

// Envelope is what Decode learned about one stored value.
type Envelope struct {
	// Format is the value's encoding.
	Format Format
	// APIVersion and Kind are the stored object's type ("v1", "ConfigMap");
	// empty for encrypted and unknown values, and when the object does not
	// say.
	APIVersion, Kind string
	// ContentType is runtime.Unknown's contentType of a protobuf envelope
	// (usually empty, meaning protobuf).
	ContentType string
	// Provider is the encryption provider of an encrypted value: aescbc,
	// aesgcm, secretbox, kms, or whatever name the prefix carries.
	Provider string
	// PrefixVersion is the version in the encryption prefix: "v1", or "v2"
	// for KMS v2.
	PrefixVersion string
	// KeyName is the encryption key's name (aescbc, aesgcm, secretbox) or
	// the KMS plugin's name (kms); empty when the prefix is malformed.
	KeyName string
}

var (
	protobufMagic = []byte("k8s\x00")
	encPrefix     = []byte("k8s:enc:")
	cborMagic     = []byte{0xd9, 0xd9, 0xf7}
)

// maxPrefixField bounds each field of an encryption prefix: a name longer
// than this is not a prefix Kubernetes wrote.
const maxPrefixField = 256

// Decode classifies a value stored by kube-apiserver and reads the API
// version and kind where the envelope carries them in the clear. It never
// fails: what it cannot recognise is FormatUnknown. It reads only the
// envelope's header (for JSON and CBOR, the top-level fields up to
// apiVersion and kind), not the whole object.
func Decode(value []byte) Envelope {
	e, av, k := decode(value)
	if av != nil {
		e.APIVersion = string(av)
	}
	if k != nil {
		e.Kind = string(k)
	}
	return e
}

// decode is Decode without converting apiVersion and kind to strings. The
// slices point into value, or are freshly unescaped JSON strings.
func decode(value []byte) (e Envelope, apiVersion, kind []byte) {
	switch {
	case bytes.HasPrefix(value, protobufMagic):
		av, k, ct, ok := decodeUnknown(value[len(protobufMagic):])
		if !ok {
			return Envelope{Format: FormatUnknown}, nil, nil
		}
		return Envelope{Format: FormatProtobuf, ContentType: string(ct)}, av, k
	case bytes.HasPrefix(value, encPrefix):
		return decodeEncrypted(value[len(encPrefix):]), nil, nil
	case bytes.HasPrefix(value, cborMagic):
		av, k, ok := cborTypeMeta(value[len(cborMagic):])
		if !ok {
			return Envelope{Format: FormatUnknown}, nil, nil
		}
		return Envelope{Format: FormatCBOR}, av, k
	}
	if i := skipSpace(value, 0); i < len(value) && value[i] == '{' {
		av, k, ok := jsonTypeMeta(value, i)
		if ok {
			return Envelope{Format: FormatJSON}, av, k
		}
	}
	return Envelope{Format: FormatUnknown}, nil, nil
}

// decodeUnknown reads runtime.Unknown: 1 typeMeta {1 apiVersion, 2 kind},
// 2 raw, 3 contentEncoding, 4 contentType.
func decodeUnknown(b []byte) (apiVersion, kind, contentType []byte, ok bool) {
	sawTypeMeta := false
	for len(b) > 0 {
		num, typ, v, n := gogoField(b)
		if n < 0 {
			return nil, nil, nil, false
		}
		b = b[n:]
		if typ != wireBytes {
			continue
		}
		switch num {
		case 1:
			// A message field given twice is merged, as protobuf (and
			// runtime.Unknown's gogo decoder) does: a later TypeMeta
			// replaces only the fields it holds.
			av, k, ok := decodeTypeMeta(v)
			if !ok {
				return nil, nil, nil, false
			}
			if av != nil {
				apiVersion = av
			}
			if k != nil {
				kind = k
			}
			sawTypeMeta = true
		case 4:
			contentType = v
		}
	}
	return apiVersion, kind, contentType, sawTypeMeta
}

func decodeTypeMeta(b []byte) (apiVersion, kind []byte, ok bool) {
	for len(b) > 0 {
		num, typ, v, n := gogoField(b)
		if n < 0 {
			return nil, nil, false
		}
		b = b[n:]
		if typ != wireBytes {
			continue
		}
		switch num {
		case 1:
			apiVersion = nonNil(v)
		case 2:
			kind = nonNil(v)
		}
	}
	return apiVersion, kind, true
}

// nonNil returns b, or an empty non-nil slice for a nil b: a field that is
// present (even empty) is told apart from one that is absent (nil).
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// decodeEncrypted reads "<provider>:<version>:<name>:" after "k8s:enc:".
// Kubernetes writes k8s:enc:aescbc:v1:NAME:, k8s:enc:aesgcm:v1:NAME:,
// k8s:enc:secretbox:v1:NAME:, k8s:enc:kms:v1:NAME: and k8s:enc:kms:v2:NAME:.
func decodeEncrypted(b []byte) Envelope {
	e := Envelope{Format: FormatEncrypted}
	var fields [3][]byte
	for i := range fields {
		j := bytes.IndexByte(b[:min(len(b), maxPrefixField)], ':')
		if j < 0 {
			break
		}
		fields[i], b = b[:j], b[j+1:]
		if i == 2 {
			e.KeyName = string(fields[2])
		}
	}
	e.Provider, e.PrefixVersion = string(fields[0]), string(fields[1])
	return e
}

// jsonTypeMeta scans the top-level members of the JSON object starting at
// b[i] == '{' for the string members apiVersion and kind, skipping every
// other value without decoding it. It stops as soon as both are found
// (Kubernetes writes them first).
func jsonTypeMeta(b []byte, i int) (apiVersion, kind []byte, ok bool) {
	i++ // '{'
	for {
		i = skipSpace(b, i)
		if i >= len(b) {
			return nil, nil, false
		}
		if b[i] == '}' {
			return apiVersion, kind, true
		}
		if b[i] != '"' {
			return nil, nil, false
		}
		end, ok := skipString(b, i)
		if !ok {
			return nil, nil, false
		}
		name := b[i:end]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, nil, false
		}
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return nil, nil, false
		}
		vstart := i
		if i, ok = skipJSONValue(b, i); !ok {
			return nil, nil, false
		}
		if b[vstart] == '"' {
			switch {
			case jsonStringIs(name, "apiVersion"):
				apiVersion = jsonString(b[vstart:i])
			case jsonStringIs(name, "kind"):
				kind = jsonString(b[vstart:i])
			}
			if apiVersion != nil && kind != nil {
				return apiVersion, kind, true
			}
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return nil, nil, false
		}
		switch b[i] {
		case ',':
			i++
		case '}':
			return apiVersion, kind, true
		default:
			return nil, nil, false
		}
	}
}

// jsonStringIs reports whether the quoted JSON string tok is s.
func jsonStringIs(tok []byte, s string) bool {
	if bytes.IndexByte(tok, '\\') < 0 {
		return len(tok) == len(s)+2 && string(tok[1:len(tok)-1]) == s
	}
	return string(jsonString(tok)) == s
}

// jsonString returns the content of the quoted JSON string tok, unescaped
// when it holds escapes.
func jsonString(tok []byte) []byte {
	if bytes.IndexByte(tok, '\\') < 0 {
		return tok[1 : len(tok)-1]
	}
	var s string
	if json.Unmarshal(tok, &s) != nil {
		return []byte{}
	}
	return []byte(s)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the JSON string starting at b[i].
func skipString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

// maxDepth bounds the nesting Decode follows in JSON and CBOR.
const maxDepth = 10000

// skipJSONValue returns the index after the JSON value starting at b[i].
// Objects and arrays are skipped by bracket counting, strings respected.
func skipJSONValue(b []byte, i int) (int, bool) {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := skipString(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				if depth++; depth > maxDepth {
					return 0, false
				}
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	}
	// number, true, false, null
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	return j, j > i
}
