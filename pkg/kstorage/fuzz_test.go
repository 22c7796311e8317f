package kstorage

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"sigs.k8s.io/yaml"
)

// The fuzz targets of this file read what is stored in etcd (values and
// keys written by whoever can write to etcd) and the removed-API catalogue
// an operator may override. Their seeds are real Kubernetes objects
// encoded by Kubernetes' own serializers (protobuf, JSON, CBOR), the
// encryption prefixes kube-apiserver writes, real keys, the embedded
// catalogue, and the files under testdata/fuzz/FuzzName/.

// realValues returns a config map as kube-apiserver stores it in protobuf
// and in JSON, and a custom resource in CBOR, each encoded by Kubernetes'
// serializers.
func realValues(tb testing.TB) [][]byte {
	tb.Helper()
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		tb.Fatal(err)
	}
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "default", UID: "8a0c2a6e-3c1e-4d8e-9f55-0a1b2c3d4e5f", Labels: map[string]string{"app": "web"}},
		Data:       map[string]string{"mode": "fast", "quote": `"}]`},
	}
	var pb bytes.Buffer
	if err := protobuf.NewSerializer(s, s).Encode(cm, &pb); err != nil {
		tb.Fatal(err)
	}
	js, err := json.Marshal(cm)
	if err != nil {
		tb.Fatal(err)
	}
	cr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w1", "namespace": "team-a", "labels": map[string]any{"a": "b"}},
		"spec":     map[string]any{"size": int64(3), "ratio": 2.5, "tags": []any{"x", "y"}, "on": true},
	}}
	var cb bytes.Buffer
	if err := cbor.NewSerializer(s, s).Encode(cr, &cb); err != nil {
		tb.Fatal(err)
	}
	if !bytes.HasPrefix(cb.Bytes(), cborMagic) {
		tb.Fatalf("CBOR serializer wrote no self-describe tag: % x", cb.Bytes()[:min(8, cb.Len())])
	}
	return [][]byte{pb.Bytes(), js, cb.Bytes()}
}

// TestRealValues: Decode reads the type of objects encoded by Kubernetes'
// own serializers (the fuzz seeds).
func TestRealValues(t *testing.T) {
	want := []Envelope{
		{Format: FormatProtobuf, APIVersion: "v1", Kind: "ConfigMap"},
		{Format: FormatJSON, APIVersion: "v1", Kind: "ConfigMap"},
		{Format: FormatCBOR, APIVersion: "example.com/v1", Kind: "Widget"},
	}
	for i, v := range realValues(t) {
		if got := Decode(v); got != want[i] {
			t.Errorf("value %d: %+v, want %+v", i, got, want[i])
		}
	}
}

// FuzzDecode classifies arbitrary values. Properties, each checked
// against an independent decoder where one exists:
//   - Decode never panics and its format agrees with the value's prefix;
//   - protobuf: when Kubernetes' runtime.Unknown unmarshals the envelope
//     and it carries a type, Decode says protobuf with the same apiVersion,
//     kind and contentType; when Decode says protobuf, runtime.Unknown
//     does not disagree about them;
//   - JSON: a valid UTF-8 JSON object (encoding/json) without duplicate
//     apiVersion or kind members is JSON, with encoding/json's values;
//   - CBOR: a value Kubernetes' CBOR decoder reads as a map is CBOR, and
//     the kind and apiVersion Decode reports are that map's;
//   - encryption prefixes: provider, version and key name are the prefix's
//     colon-separated fields.
func FuzzDecode(f *testing.F) {
	for _, v := range realValues(f) {
		f.Add(v)
	}
	for _, p := range []string{"aescbc:v1:key1:", "aesgcm:v1:2024-key:", "secretbox:v1:sb:", "kms:v1:vault:", "kms:v2:cloud-kms:"} {
		f.Add(append([]byte("k8s:enc:"+p), 0x8f, 0x01, ':', 0x00))
	}
	f.Add([]byte(`{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"w"}}`))
	f.Add([]byte(`{"apiVersion":"example.com\/v1","k\u0069nd":"W\u00e9"}`))
	f.Add(cborDoc(cborTextBytes("metadata"), []byte{0xbf, 0x61, 'a', 0x9f, 1, 0xff, 0xff}, cborTextBytes("kind"), cborTextBytes("K")))
	f.Fuzz(func(t *testing.T, value []byte) {
		e := Decode(value)
		switch {
		case bytes.HasPrefix(value, protobufMagic):
			if e.Format != FormatProtobuf && e.Format != FormatUnknown {
				t.Fatalf("protobuf magic, format %s", e.Format)
			}
			checkProtobuf(t, value, e)
		case bytes.HasPrefix(value, encPrefix):
			if e.Format != FormatEncrypted {
				t.Fatalf("encryption prefix, format %s", e.Format)
			}
			checkEncrypted(t, value, e)
		case bytes.HasPrefix(value, cborMagic):
			if e.Format != FormatCBOR && e.Format != FormatUnknown {
				t.Fatalf("CBOR tag, format %s", e.Format)
			}
			checkCBOR(t, value, e)
		default:
			if e.Format != FormatJSON && e.Format != FormatUnknown {
				t.Fatalf("no magic, format %s", e.Format)
			}
			checkJSON(t, value, e)
		}
		if e.Format == FormatUnknown && e != (Envelope{Format: FormatUnknown}) {
			t.Fatalf("unknown format with fields: %+v", e)
		}
	})
}

func checkProtobuf(t *testing.T, value []byte, e Envelope) {
	var u runtime.Unknown
	if err := u.Unmarshal(value[len(protobufMagic):]); err != nil {
		return // Kubernetes could not read it either; Decode may still classify
	}
	if e.Format == FormatUnknown {
		if u.APIVersion != "" || u.Kind != "" {
			t.Fatalf("runtime.Unknown reads %s %s, Decode says unknown", u.APIVersion, u.Kind)
		}
		return
	}
	if e.APIVersion != u.APIVersion || e.Kind != u.Kind || e.ContentType != u.ContentType {
		t.Fatalf("Decode %+v, runtime.Unknown %q %q %q", e, u.APIVersion, u.Kind, u.ContentType)
	}
}

func checkEncrypted(t *testing.T, value []byte, e Envelope) {
	fields := strings.SplitN(string(value[len(encPrefix):]), ":", 4)
	if len(fields) < 4 {
		return // a prefix cut short: Decode keeps what it found
	}
	for _, f := range fields[:3] {
		if len(f) >= maxPrefixField {
			return
		}
	}
	if e.Provider != fields[0] || e.PrefixVersion != fields[1] || e.KeyName != fields[2] {
		t.Fatalf("prefix fields %q, Decode %+v", fields[:3], e)
	}
}

func checkCBOR(t *testing.T, value []byte, e Envelope) {
	var m map[string]any
	if err := direct.Unmarshal(value, &m); err != nil || m == nil {
		return
	}
	if e.Format != FormatCBOR {
		t.Fatalf("Kubernetes' CBOR decoder reads a map, Decode says %s", e.Format)
	}
	for name, got := range map[string]string{"apiVersion": e.APIVersion, "kind": e.Kind} {
		if got == "" {
			continue
		}
		if s, ok := m[name].(string); !ok || s != got {
			t.Fatalf("%s: Decode %q, Kubernetes' CBOR decoder %#v", name, got, m[name])
		}
	}
}

func checkJSON(t *testing.T, value []byte, e Envelope) {
	if !json.Valid(value) || !utf8.Valid(value) {
		return
	}
	keys, ok := topLevelKeys(value)
	if !ok || keys["apiVersion"] > 1 || keys["kind"] > 1 {
		return
	}
	var m map[string]any
	if err := json.Unmarshal(value, &m); err != nil {
		t.Fatalf("valid JSON object does not unmarshal: %v", err)
	}
	if e.Format != FormatJSON {
		t.Fatalf("a valid JSON object, Decode says %s", e.Format)
	}
	want := func(name string) string { s, _ := m[name].(string); return s }
	if e.APIVersion != want("apiVersion") || e.Kind != want("kind") {
		t.Fatalf("Decode %q %q, encoding/json %#v %#v", e.APIVersion, e.Kind, m["apiVersion"], m["kind"])
	}
}

// topLevelKeys counts the member names of the JSON object value; false
// when value is not an object.
func topLevelKeys(value []byte) (map[string]int, bool) {
	dec := json.NewDecoder(bytes.NewReader(value))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	keys := map[string]int{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		keys[tok.(string)]++
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, false
		}
	}
	if _, err := dec.Token(); err != nil && !errors.Is(err, io.EOF) {
		return nil, false
	}
	return keys, true
}

// FuzzParseKey splits arbitrary keys under arbitrary prefixes. Property:
// a key ParseKey accepts is exactly PREFIX/PATH[/NAMESPACE]/NAME of the
// parts it returns, each part non-empty and namespace and name without a
// slash; the resource is named.
func FuzzParseKey(f *testing.F) {
	for _, k := range []string{
		"/registry/configmaps/default/foo", "/registry/namespaces/kube-system",
		"/registry/services/specs/default/kubernetes", "/registry/services/endpoints/default/kubernetes",
		"/registry/minions/node-1", "/registry/apiregistration.k8s.io/apiservices/v1.apps",
		"/registry/example.com/widgets/team-a/w1", "/registry/health", "/registry/a/b/c/d/e/f/g",
	} {
		f.Add(DefaultPrefix, []byte(k))
	}
	f.Add("/", []byte("/pods/ns/p"))
	f.Add("/custom/", []byte("/custom/pods/ns/p"))
	f.Fuzz(func(t *testing.T, prefix string, key []byte) {
		prefix = NormalizePrefix(prefix)
		k, ok := ParseKey(prefix, key)
		if !ok {
			if k != (Key{}) {
				t.Fatalf("refused key with parts %+v", k)
			}
			return
		}
		rebuilt := prefix + "/" + k.Path + "/" + k.Name
		if k.Namespace != "" {
			rebuilt = prefix + "/" + k.Path + "/" + k.Namespace + "/" + k.Name
		}
		if rebuilt != string(key) {
			t.Fatalf("%q parsed as %+v, which rebuilds %q", key, k, rebuilt)
		}
		if k.Name == "" || k.Resource == "" || strings.Contains(k.Name, "/") || strings.Contains(k.Namespace, "/") {
			t.Fatalf("%q parsed as %+v", key, k)
		}
		for _, seg := range strings.Split(k.Path, "/") {
			if seg == "" {
				t.Fatalf("%q: empty segment in path %q", key, k.Path)
			}
		}
	})
}

// FuzzParseRemoved reads arbitrary removed-API catalogues. Property: a
// catalogue ParseRemoved accepts has the shape it checks (kind, non-empty
// apiVersions with at most one slash, kinds, a removedIn ParseMinor reads,
// no pair twice), finds each of its entries with Lookup, and survives a
// YAML round trip unchanged.
func FuzzParseRemoved(f *testing.F) {
	f.Add(embeddedRemoved)
	f.Add([]byte("kind: RemovedAPICatalogue\nremoved:\n- apiVersion: a/v1\n  kinds: [A, B]\n  removedIn: \"1.2\"\n  replacement: a/v2\n"))
	f.Add([]byte("kind: RemovedAPICatalogue\nremoved: []\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		c, err := ParseRemoved(doc)
		if err != nil {
			return
		}
		if c.Kind != "RemovedAPICatalogue" {
			t.Fatalf("kind %q accepted", c.Kind)
		}
		for _, r := range c.Removed {
			if r.APIVersion == "" || strings.Count(r.APIVersion, "/") > 1 || len(r.Kinds) == 0 {
				t.Fatalf("entry accepted: %+v", r)
			}
			if _, _, err := ParseMinor(r.RemovedIn); err != nil {
				t.Fatalf("removedIn %q accepted: %v", r.RemovedIn, err)
			}
			for _, k := range r.Kinds {
				if got, ok := c.Lookup(r.APIVersion, k); !ok || !reflect.DeepEqual(got, r) {
					t.Fatalf("Lookup(%q, %q) = %+v, %v; want %+v", r.APIVersion, k, got, ok, r)
				}
			}
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("marshal an accepted catalogue: %v", err)
		}
		back, err := ParseRemoved(out)
		if err != nil {
			t.Fatalf("an accepted catalogue, written back, is refused: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("round trip changed the catalogue:\n%+v\n%+v", c, back)
		}
	})
}
