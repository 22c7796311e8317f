package kmigrate

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
)

// encodeProto encodes obj as kube-apiserver does in protobuf.
func encodeProto(t *testing.T, obj runtime.Object) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(obj, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func configMap(ns, name, rv string) corev1.ConfigMap {
	return corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv, UID: types.UID("uid-" + name),
			Labels: map[string]string{"app": "x"}},
		Data:       map[string]string{"payload": strings.Repeat("x", 100), "index": name},
		BinaryData: map[string][]byte{"bin": {0, 1, 2, 255}},
	}
}

// TestDecodeProtoPage: a protobuf list page as the API server sends it
// gives the continue token, the remaining count, each object's key, and
// request bodies that decode (with the real protobuf serializer) to
// exactly the listed objects, resourceVersion included.
func TestDecodeProtoPage(t *testing.T) {
	remaining := int64(1234)
	cms := &corev1.ConfigMapList{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"},
		ListMeta: metav1.ListMeta{Continue: "tok-1", RemainingItemCount: &remaining, ResourceVersion: "99"},
		Items:    []corev1.ConfigMap{configMap("a-b", "x", "7"), configMap("a", "z", "8"), configMap("b", "cm-0000001", "9")},
	}
	nss := &corev1.NamespaceList{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "NamespaceList"},
		Items:    []corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", ResourceVersion: "3"}}},
	}
	empty := &corev1.ConfigMapList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"}}
	tests := []struct {
		name      string
		list      runtime.Object
		items     []runtime.Object
		next      string
		remaining int64
		keys      []string
	}{
		{"namespaced, more to come", cms, []runtime.Object{&cms.Items[0], &cms.Items[1], &cms.Items[2]}, "tok-1", 1234, []string{"a-b/x", "a/z", "b/cm-0000001"}},
		{"cluster-scoped, last page", nss, []runtime.Object{&nss.Items[0]}, "", -1, []string{"kube-system"}},
		{"empty", empty, nil, "", -1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := decodePage(encodeProto(t, tt.list), "application/vnd.kubernetes.protobuf")
			if err != nil {
				t.Fatal(err)
			}
			if p.next != tt.next || p.remaining != tt.remaining {
				t.Errorf("next %q remaining %d, want %q %d", p.next, p.remaining, tt.next, tt.remaining)
			}
			if len(p.objects) != len(tt.items) {
				t.Fatalf("%d objects, want %d", len(p.objects), len(tt.items))
			}
			wantLast := ""
			for i, o := range p.objects {
				if o.key() != tt.keys[i] || o.contentType != mediaProtobuf {
					t.Errorf("object %d: key %q content type %q, want %q protobuf", i, o.key(), o.contentType, tt.keys[i])
				}
				got, gvk, err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Decode(o.body, nil, nil)
				if err != nil {
					t.Fatalf("object %d: the request body does not decode: %v", i, err)
				}
				want := tt.items[i].DeepCopyObject()
				want.GetObjectKind().SetGroupVersionKind(gvk.GroupVersion().WithKind(strings.TrimSuffix(tt.list.GetObjectKind().GroupVersionKind().Kind, "List")))
				got.GetObjectKind().SetGroupVersionKind(want.GetObjectKind().GroupVersionKind())
				if gvk.Version != "v1" || gvk.Kind+"List" != tt.list.GetObjectKind().GroupVersionKind().Kind {
					t.Errorf("object %d: envelope says %v", i, gvk)
				}
				if !equality.Semantic.DeepEqual(got, want) {
					t.Errorf("object %d: sent back\n%#v\nwant\n%#v", i, got, want)
				}
				wantLast = tt.keys[i]
			}
			if p.lastKey != wantLast {
				t.Errorf("lastKey %q, want %q", p.lastKey, wantLast)
			}
		})
	}
}

// TestDecodeProtoPageErrors: what is not a protobuf list is one error.
func TestDecodeProtoPageErrors(t *testing.T) {
	noName := &corev1.ConfigMapList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"}, Items: []corev1.ConfigMap{{}}}
	one := configMap("a", "b", "1")
	one.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
	good := encodeProto(t, &corev1.ConfigMapList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"}, Items: []corev1.ConfigMap{configMap("a", "b", "1")}})
	tests := []struct {
		name, body, want string
	}{
		{"JSON", `{"kind":"ConfigMapList"}`, "no k8s magic prefix"},
		{"not a list", string(encodeProto(t, &one)), `not a list`},
		{"no name", string(encodeProto(t, noName)), "no metadata.name"},
		{"truncated", string(good[:len(good)-5]), "decode list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodePage([]byte(tt.body), "application/vnd.kubernetes.protobuf")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestDecodePageContentType: the answer's Content-Type picks the decoder.
func TestDecodePageContentType(t *testing.T) {
	pb := encodeProto(t, &corev1.ConfigMapList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"}, Items: []corev1.ConfigMap{configMap("a", "b", "1")}})
	js := []byte(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"b","namespace":"a"}}]}`)
	tests := []struct {
		contentType string
		body        []byte
		want        string
	}{
		{"application/vnd.kubernetes.protobuf", pb, mediaProtobuf},
		{"application/vnd.kubernetes.protobuf; charset=binary", pb, mediaProtobuf},
		{"application/json", js, mediaJSON},
		{"application/json;charset=utf-8", js, mediaJSON},
	}
	for _, tt := range tests {
		p, err := decodePage(tt.body, tt.contentType)
		if err != nil {
			t.Fatalf("%s: %v", tt.contentType, err)
		}
		if len(p.objects) != 1 || p.objects[0].key() != "a/b" || p.objects[0].contentType != tt.want {
			t.Errorf("%s: %+v, want a/b as %s", tt.contentType, p.objects, tt.want)
		}
	}
}

// TestUsesProtobuf: built-in kinds in protobuf, custom resources and
// unknown kinds in JSON.
func TestUsesProtobuf(t *testing.T) {
	tests := []struct {
		r    Resource
		want bool
	}{
		{Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap"}, true},
		{Resource{Group: "apps", Version: "v1", Resource: "deployments", Kind: "Deployment"}, true},
		{Resource{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget"}, false},
		{Resource{Version: "v1", Resource: "configmaps"}, false},                    // no kind: JSON
		{Resource{Version: "v9", Resource: "configmaps", Kind: "ConfigMap"}, false}, // a version client-go does not know
	}
	for _, tt := range tests {
		if got := UsesProtobuf(tt.r); got != tt.want {
			t.Errorf("UsesProtobuf(%s %s) = %v, want %v", tt.r.GroupVersion(), tt.r.Kind, got, tt.want)
		}
	}
}
