package kstorage

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// protoEnvelope builds what kube-apiserver stores for a built-in object:
// "k8s\x00" and a runtime.Unknown {1 typeMeta {1 apiVersion, 2 kind},
// 2 raw, 3 contentEncoding, 4 contentType}.
func protoEnvelope(apiVersion, kind string, raw []byte) []byte {
	var tm []byte
	tm = protowire.AppendTag(tm, 1, protowire.BytesType)
	tm = protowire.AppendString(tm, apiVersion)
	tm = protowire.AppendTag(tm, 2, protowire.BytesType)
	tm = protowire.AppendString(tm, kind)
	u := []byte("k8s\x00")
	u = protowire.AppendTag(u, 1, protowire.BytesType)
	u = protowire.AppendBytes(u, tm)
	u = protowire.AppendTag(u, 2, protowire.BytesType)
	u = protowire.AppendBytes(u, raw)
	u = protowire.AppendTag(u, 3, protowire.BytesType)
	u = protowire.AppendString(u, "")
	u = protowire.AppendTag(u, 4, protowire.BytesType)
	u = protowire.AppendString(u, "")
	return u
}

// cbor helpers: a head, a text string, a map header.
func cborHeadBytes(major byte, n uint64) []byte {
	switch {
	case n < 24:
		return []byte{major<<5 | byte(n)}
	case n < 1<<8:
		return []byte{major<<5 | 24, byte(n)}
	case n < 1<<16:
		return []byte{major<<5 | 25, byte(n >> 8), byte(n)}
	}
	return []byte{major<<5 | 26, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
}

func cborTextBytes(s string) []byte { return append(cborHeadBytes(3, uint64(len(s))), s...) }

func cborDoc(items ...[]byte) []byte {
	b := []byte{0xd9, 0xd9, 0xf7}
	b = append(b, cborHeadBytes(5, uint64(len(items)/2))...)
	for _, it := range items {
		b = append(b, it...)
	}
	return b
}

func TestDecode(t *testing.T) {
	raw := bytes.Repeat([]byte{0x0a, 0x00, 0xff}, 100)
	bigRaw := bytes.Repeat([]byte("x"), 70000) // multi-byte length prefix
	cborMeta := append(cborHeadBytes(5, 2), cborTextBytes("name")...)
	cborMeta = append(cborMeta, cborTextBytes("w1")...)
	cborMeta = append(cborMeta, cborTextBytes("labels")...)
	cborMeta = append(cborMeta, 0xbf, 0x61, 'a', 0x7f, 0x61, 'b', 0x61, 'c', 0xff, 0xff)          // indefinite map, chunked text
	cborSpec := append(cborHeadBytes(4, 3), 0x01, 0x39, 0x01, 0x00, 0xfb, 0, 0, 0, 0, 0, 0, 0, 0) // [1, -257, 0.0]
	tests := []struct {
		name  string
		value []byte
		want  Envelope
	}{
		{"protobuf configmap", protoEnvelope("v1", "ConfigMap", raw), Envelope{Format: FormatProtobuf, APIVersion: "v1", Kind: "ConfigMap"}},
		{"protobuf group version", protoEnvelope("batch/v1beta1", "CronJob", bigRaw), Envelope{Format: FormatProtobuf, APIVersion: "batch/v1beta1", Kind: "CronJob"}},
		{"protobuf without raw", protoEnvelope("apps/v1", "Deployment", nil), Envelope{Format: FormatProtobuf, APIVersion: "apps/v1", Kind: "Deployment"}},
		{"protobuf truncated", protoEnvelope("v1", "Secret", raw)[:40], Envelope{Format: FormatUnknown}},
		{"protobuf magic only", []byte("k8s\x00"), Envelope{Format: FormatUnknown}},
		{"protobuf garbage", []byte("k8s\x00\x0a\xff\xff\xff"), Envelope{Format: FormatUnknown}},
		{"json kind first", []byte(`{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"w"}}`), Envelope{Format: FormatJSON, APIVersion: "example.com/v1", Kind: "Widget"}},
		{"json apiVersion last, nested before", []byte(` {"metadata":{"name":"x","labels":{"a":"}"}},"spec":[1,2.5e3,{"b":"\"q]"}],"t":true,"n":null,"kind":"ConfigMap", "apiVersion" : "v1"}`),
			Envelope{Format: FormatJSON, APIVersion: "v1", Kind: "ConfigMap"}},
		{"json escapes", []byte(`{"apiVersion":"example.com\/v1","k\u0069nd":"W\u00e9"}`), Envelope{Format: FormatJSON, APIVersion: "example.com/v1", Kind: "Wé"}},
		{"json without type", []byte(`{"a":1}`), Envelope{Format: FormatJSON}},
		{"json non-string kind", []byte(`{"kind":3,"apiVersion":"v1"}`), Envelope{Format: FormatJSON, APIVersion: "v1"}},
		{"json empty object", []byte(`{}`), Envelope{Format: FormatJSON}},
		{"json truncated", []byte(`{"metadata":{"name":"x"`), Envelope{Format: FormatUnknown}},
		{"json bad member", []byte(`{"a" 1}`), Envelope{Format: FormatUnknown}},
		{"json array", []byte(`[1,2]`), Envelope{Format: FormatUnknown}},
		{"cbor", cborDoc(cborTextBytes("apiVersion"), cborTextBytes("example.com/v1"), cborTextBytes("kind"), cborTextBytes("Widget")),
			Envelope{Format: FormatCBOR, APIVersion: "example.com/v1", Kind: "Widget"}},
		{"cbor type after nested items", cborDoc(cborTextBytes("metadata"), cborMeta, cborTextBytes("spec"), cborSpec,
			cborTextBytes("kind"), cborTextBytes("Widget"), cborTextBytes("apiVersion"), cborTextBytes("example.com/v2")),
			Envelope{Format: FormatCBOR, APIVersion: "example.com/v2", Kind: "Widget"}},
		{"cbor without type", cborDoc(cborTextBytes("spec"), cborSpec), Envelope{Format: FormatCBOR}},
		{"cbor not a map", []byte{0xd9, 0xd9, 0xf7, 0x83, 1, 2, 3}, Envelope{Format: FormatUnknown}},
		{"cbor truncated", cborDoc(cborTextBytes("apiVersion"), cborTextBytes("example.com/v1"))[:12], Envelope{Format: FormatUnknown}},
		{"aescbc", append([]byte("k8s:enc:aescbc:v1:key1:"), raw...), Envelope{Format: FormatEncrypted, Provider: "aescbc", PrefixVersion: "v1", KeyName: "key1"}},
		{"aesgcm", append([]byte("k8s:enc:aesgcm:v1:2024-key:"), raw...), Envelope{Format: FormatEncrypted, Provider: "aesgcm", PrefixVersion: "v1", KeyName: "2024-key"}},
		{"secretbox", append([]byte("k8s:enc:secretbox:v1:sb:"), raw...), Envelope{Format: FormatEncrypted, Provider: "secretbox", PrefixVersion: "v1", KeyName: "sb"}},
		{"kms v1", append([]byte("k8s:enc:kms:v1:vault-plugin:"), raw...), Envelope{Format: FormatEncrypted, Provider: "kms", PrefixVersion: "v1", KeyName: "vault-plugin"}},
		{"kms v2", append([]byte("k8s:enc:kms:v2:cloud-kms:"), raw...), Envelope{Format: FormatEncrypted, Provider: "kms", PrefixVersion: "v2", KeyName: "cloud-kms"}},
		{"encrypted, ciphertext has colons", []byte("k8s:enc:aescbc:v1:k:\x00:\x01:"), Envelope{Format: FormatEncrypted, Provider: "aescbc", PrefixVersion: "v1", KeyName: "k"}},
		{"encrypted, prefix cut short", []byte("k8s:enc:aescbc:v1"), Envelope{Format: FormatEncrypted, Provider: "aescbc"}},
		{"encrypted, no provider", []byte("k8s:enc:"), Envelope{Format: FormatEncrypted}},
		{"plain text", []byte("hello"), Envelope{Format: FormatUnknown}},
		{"empty", nil, Envelope{Format: FormatUnknown}},
		{"etcd lease-like binary", []byte{0x08, 0x96, 0x01}, Envelope{Format: FormatUnknown}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decode(tc.value); got != tc.want {
				t.Errorf("Decode = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestDecodeNeverPanics feeds every prefix of valid envelopes to Decode.
func TestDecodeNeverPanics(t *testing.T) {
	for _, v := range [][]byte{
		protoEnvelope("v1", "ConfigMap", bytes.Repeat([]byte{1}, 300)),
		[]byte(`{"metadata":{"name":"x","a":[{"b":"\\\""}]},"kind":"K","apiVersion":"v1"}`),
		cborDoc(cborTextBytes("metadata"), []byte{0xbf, 0x61, 'a', 0x9f, 1, 0xff, 0xff}, cborTextBytes("kind"), cborTextBytes("K")),
		[]byte("k8s:enc:kms:v2:name:data"),
	} {
		for i := range v {
			_ = Decode(v[:i])
		}
	}
	deep := append([]byte{0xd9, 0xd9, 0xf7, 0xa1, 0x61, 'a'}, bytes.Repeat([]byte{0x81}, 20000)...)
	if got := Decode(deep); got.Format != FormatUnknown {
		t.Errorf("deeply nested CBOR: %+v", got)
	}
}

func BenchmarkDecode(b *testing.B) {
	values := [][]byte{
		protoEnvelope("v1", "ConfigMap", bytes.Repeat([]byte("x"), 500)),
		[]byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":3}}`),
	}
	for i := 0; i < b.N; i++ {
		_, _, _ = decode(values[i%2])
	}
}
