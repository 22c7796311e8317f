package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/etcd-steward/steward/pkg/kstorage"
	"github.com/etcd-steward/steward/test/harness"
)

// version36 is the 3.6 version among the test versions (the line
// Kubernetes 1.36 ships with).
func version36(t *testing.T) string {
	t.Helper()
	for _, v := range harness.Versions() {
		if strings.HasPrefix(v, "3.6.") {
			return v
		}
	}
	t.Fatalf("no etcd 3.6 version in %v", harness.Versions())
	return ""
}

var (
	crdGVR    = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	widgetGVR = schema.GroupVersionResource{Group: "steward.test", Version: "v1", Resource: "widgets"}
)

// testCRD is a namespaced CRD for group's plural of kind, serving versions
// (storage names the stored one), each with spec.size (integer),
// spec.color (string) and spec.tags (strings).
func testCRD(group, plural, kind, storage string, versions ...string) *unstructured.Unstructured {
	var vs []any
	for _, v := range versions {
		vs = append(vs, map[string]any{
			"name": v, "served": true, "storage": v == storage,
			"schema": map[string]any{"openAPIV3Schema": map[string]any{
				"type": "object",
				"properties": map[string]any{"spec": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"size":  map[string]any{"type": "integer"},
						"color": map[string]any{"type": "string"},
						"tags":  map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
					},
				}},
			}},
		})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": plural + "." + group},
		"spec": map[string]any{
			"group":    group,
			"scope":    "Namespaced",
			"names":    map[string]any{"plural": plural, "singular": strings.ToLower(kind), "kind": kind, "listKind": kind + "List"},
			"versions": vs,
		},
	}}
}

// createEstablishedCRD creates crd and waits until it is Established; it
// returns the CRD as read then.
func createEstablishedCRD(t *testing.T, ctx context.Context, dyn dynamic.Interface, crd *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *unstructured.Unstructured
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the CRD to be Established", func() error {
		var err error
		if got, err = dyn.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{}); err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", conds)
	})
	return got
}

// TestKubeAPIServerOnSteward: a real kube-apiserver runs on a three-member
// Steward cluster over TLS with Steward's client certificate; objects of
// built-in kinds and of a CRD written through it read back unchanged, and
// are stored in etcd under /registry at the revision the API reports as
// their resourceVersion.
func TestKubeAPIServerOnSteward(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(3, version36(t))
	k := e.StartKubeAPIServer()
	if _, err := os.Stat(k.Kubeconfig); err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	cs := k.Clientset()
	dyn := k.Dynamic()
	ctx := t.Context()
	const ns = "steward-e2e"

	if v, err := cs.Discovery().ServerVersion(); err != nil {
		t.Fatal(err)
	} else if v.GitVersion != harness.Kubernetes {
		t.Errorf("server version %s, want %s", v.GitVersion, harness.Kubernetes)
	}

	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cmData := map[string]string{"greeting": "hello from steward", "count": "3"}
	cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings", Labels: map[string]string{"app": "web"}},
		Data:       cmData,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secretData := map[string][]byte{"password": []byte("s3cret-value"), "blob": {0, 1, 2, 255}}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "credentials"},
		Type:       corev1.SecretTypeOpaque,
		Data:       secretData,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	replicas := int32(2)
	labels := map[string]string{"app": "web"}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "web", Image: "registry.k8s.io/pause:3.10",
					Env: []corev1.EnvVar{{Name: "GREETING", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "greeting",
					}}}},
				}}},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A CRD, established, and one custom resource (dynamic client).
	createEstablishedCRD(t, ctx, dyn, testCRD(widgetGVR.Group, widgetGVR.Resource, "Widget", "v1", "v1"))
	widget := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "steward.test/v1",
		"kind":       "Widget",
		"metadata":   map[string]any{"name": "gizmo", "namespace": ns},
		"spec":       map[string]any{"size": int64(3), "color": "blue", "tags": []any{"a", "b"}},
	}}
	// Established means the API is served; the handler for the new group can
	// still answer 404 for a moment.
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the custom resource to be created", func() error {
		_, err := dyn.Resource(widgetGVR).Namespace(ns).Create(ctx, widget, metav1.CreateOptions{})
		return err
	})

	// Everything reads back as written.
	gotCM, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(gotCM.Data, cmData) || gotCM.Labels["app"] != "web" {
		t.Errorf("config map: data %v labels %v, want data %v and app=web", gotCM.Data, gotCM.Labels, cmData)
	}
	gotSecret, err := cs.CoreV1().Secrets(ns).Get(ctx, "credentials", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(gotSecret.Data) != len(secretData) || !bytes.Equal(gotSecret.Data["password"], secretData["password"]) || !bytes.Equal(gotSecret.Data["blob"], secretData["blob"]) {
		t.Errorf("secret data %v, want %v", gotSecret.Data, secretData)
	}
	gotDep, err := cs.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *gotDep.Spec.Replicas != 2 || gotDep.Spec.Template.Spec.Containers[0].Image != "registry.k8s.io/pause:3.10" ||
		gotDep.Spec.Template.Spec.Containers[0].Env[0].ValueFrom.ConfigMapKeyRef.Key != "greeting" {
		t.Errorf("deployment spec changed: %+v", gotDep.Spec)
	}
	gotWidget, err := dyn.Resource(widgetGVR).Namespace(ns).Get(ctx, "gizmo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantSpec, _ := json.Marshal(widget.Object["spec"])
	gotSpec, _ := json.Marshal(gotWidget.Object["spec"])
	if !bytes.Equal(gotSpec, wantSpec) {
		t.Errorf("widget spec %s, want %s", gotSpec, wantSpec)
	}
	nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nss.Items {
		names = append(names, n.Name)
	}
	for _, want := range []string{"default", "kube-system", ns} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
			t.Errorf("namespaces %v: %s missing", names, want)
		}
	}

	// The objects are in etcd, under the keys the API server's storage uses:
	// built-in kinds as protobuf ("k8s\x00" envelope), custom resources as
	// JSON, nothing encrypted.
	cli := e.Client()
	keys := []struct {
		key, format, contains string
	}{
		{"/registry/namespaces/" + ns, "protobuf", ns},
		{"/registry/configmaps/" + ns + "/settings", "protobuf", "hello from steward"},
		{"/registry/secrets/" + ns + "/credentials", "protobuf", "s3cret-value"},
		{"/registry/deployments/" + ns + "/web", "protobuf", "registry.k8s.io/pause:3.10"},
		{"/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.steward.test", "json", `"group":"steward.test"`},
		{"/registry/steward.test/widgets/" + ns + "/gizmo", "json", `"color":"blue"`},
	}
	for _, k := range keys {
		resp, err := cli.Get(ctx, k.key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 {
			t.Errorf("etcd key %s: not found", k.key)
			continue
		}
		v := resp.Kvs[0].Value
		switch k.format {
		case "protobuf":
			if !bytes.HasPrefix(v, []byte("k8s\x00")) {
				t.Errorf("etcd key %s: want the protobuf envelope, value starts %q", k.key, v[:min(len(v), 16)])
			}
		case "json":
			if !json.Valid(v) {
				t.Errorf("etcd key %s: want JSON, value starts %q", k.key, v[:min(len(v), 16)])
			}
		}
		if !bytes.Contains(v, []byte(k.contains)) {
			t.Errorf("etcd key %s: value does not contain %q", k.key, k.contains)
		}
	}
	// resourceVersion is the etcd revision of the object's last write.
	resp, err := cli.Get(ctx, "/registry/configmaps/"+ns+"/settings")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 1 && strconv.FormatInt(resp.Kvs[0].ModRevision, 10) != cm.ResourceVersion {
		t.Errorf("config map resourceVersion %s, etcd mod revision %d", cm.ResourceVersion, resp.Kvs[0].ModRevision)
	}

	// The storage-version inventory of the live cluster finds them, and
	// what kube-apiserver wrote itself: built-in kinds in their storage
	// version as protobuf, the custom resource and its CRD as JSON, all
	// plain; each resource counting exactly the keys etcd holds for it at
	// the inventory's revision.
	rep := harness.InspectJSON(t, e)
	if rep.Source.Type != "cluster" || rep.Prefix != "/registry" || rep.Totals.EncryptedObjects != 0 || rep.Totals.PlainObjects != rep.Totals.Objects {
		t.Errorf("inventory: source %+v, prefix %s, totals %+v; want the cluster under /registry, nothing encrypted", rep.Source, rep.Prefix, rep.Totals)
	}
	for _, w := range []struct {
		resource, path, apiVersion, kind string
		format                           kstorage.Format
		atLeast                          int64
	}{
		{"configmaps", "configmaps", "v1", "ConfigMap", kstorage.FormatProtobuf, 1},
		{"secrets", "secrets", "v1", "Secret", kstorage.FormatProtobuf, 1},
		{"deployments", "deployments", "apps/v1", "Deployment", kstorage.FormatProtobuf, 1},
		{"namespaces", "namespaces", "v1", "Namespace", kstorage.FormatProtobuf, 3}, // default, kube-system, ns
		{"widgets.steward.test", "steward.test/widgets", "steward.test/v1", "Widget", kstorage.FormatJSON, 1},
		// kube-apiserver stores CRDs in v1beta1, more compact than v1
		// (kubernetes/kubernetes#82292), though it serves only v1.
		{"customresourcedefinitions.apiextensions.k8s.io", "apiextensions.k8s.io/customresourcedefinitions", "apiextensions.k8s.io/v1beta1", "CustomResourceDefinition", kstorage.FormatJSON, 1},
	} {
		r := harness.InspectResource(rep, w.resource)
		if r.Path != w.path || r.Objects < w.atLeast || r.PlainObjects != r.Objects || r.EncryptedObjects != 0 || len(r.Encryption) != 0 ||
			len(r.Versions) != 1 || r.Versions[0].APIVersion != w.apiVersion || r.Versions[0].Kind != w.kind || r.Versions[0].Format != w.format || r.Versions[0].Objects != r.Objects {
			t.Errorf("inventory of %s: %+v; want at least %d plain objects at %s, all %s %s as %s", w.resource, r, w.atLeast, w.path, w.apiVersion, w.kind, w.format)
			continue
		}
		resp, err := cli.Get(ctx, "/registry/"+w.path+"/", clientv3.WithPrefix(), clientv3.WithRev(rep.Source.Revision), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count != r.Objects {
			t.Errorf("inventory of %s: %d objects; etcd holds %d keys under /registry/%s/ at revision %d", w.resource, r.Objects, resp.Count, w.path, rep.Source.Revision)
		}
	}

	// A restarted server serves the same objects to the same client.
	k.Stop()
	k.Start()
	gotCM, err = cs.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if gotCM.ResourceVersion != cm.ResourceVersion || !maps.Equal(gotCM.Data, cmData) {
		t.Errorf("config map after restart: resourceVersion %s data %v, want %s %v", gotCM.ResourceVersion, gotCM.Data, cm.ResourceVersion, cmData)
	}
}
