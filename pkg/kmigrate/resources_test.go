package kmigrate

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var rw = metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}

// discovered is what legacy discovery returns for a small cluster.
var discovered = []*metav1.APIResourceList{
	{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", SingularName: "configmap", Namespaced: true, Kind: "ConfigMap", Verbs: rw, ShortNames: []string{"cm"}, StorageVersionHash: "qFsyl6wFWjQ="},
		{Name: "pods", SingularName: "pod", Namespaced: true, Kind: "Pod", Verbs: rw, ShortNames: []string{"po"}, StorageVersionHash: "xPOwRZ+Yhw8="},
		{Name: "pods/status", Namespaced: true, Kind: "Pod", Verbs: metav1.Verbs{"get", "patch", "update"}},
		{Name: "events", SingularName: "event", Namespaced: true, Kind: "Event", Verbs: rw, ShortNames: []string{"ev"}, StorageVersionHash: "r2yiGXH7wu8="},
		{Name: "namespaces", SingularName: "namespace", Kind: "Namespace", Verbs: rw, ShortNames: []string{"ns"}, StorageVersionHash: "Q3oi5N2YM8M="},
		{Name: "componentstatuses", SingularName: "componentstatus", Kind: "ComponentStatus", Verbs: metav1.Verbs{"get", "list"}, ShortNames: []string{"cs"}},
		{Name: "bindings", SingularName: "binding", Namespaced: true, Kind: "Binding", Verbs: metav1.Verbs{"create"}},
	}},
	{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
		{Name: "deployments", SingularName: "deployment", Namespaced: true, Kind: "Deployment", Verbs: rw, ShortNames: []string{"deploy"}, StorageVersionHash: "8aSe+NMegvE="},
	}},
	{GroupVersion: "events.k8s.io/v1", APIResources: []metav1.APIResource{
		{Name: "events", SingularName: "event", Namespaced: true, Kind: "Event", Verbs: rw, ShortNames: []string{"ev"}, StorageVersionHash: "r2yiGXH7wu8="},
	}},
	{GroupVersion: "authentication.k8s.io/v1", APIResources: []metav1.APIResource{
		{Name: "tokenreviews", SingularName: "tokenreview", Kind: "TokenReview", Verbs: metav1.Verbs{"create"}},
	}},
	{GroupVersion: "example.com/v2", APIResources: []metav1.APIResource{
		{Name: "widgets", SingularName: "widget", Namespaced: true, Kind: "Widget", Verbs: rw, ShortNames: []string{"wd"}, StorageVersionHash: "aaaa"},
	}},
	{GroupVersion: "other.io/v1", APIResources: []metav1.APIResource{
		{Name: "widgets", SingularName: "widget", Kind: "Widget", Verbs: rw, StorageVersionHash: "bbbb"},
		{Name: "gadgets", SingularName: "gadget", Namespaced: true, Kind: "Gadget", Verbs: rw, StorageVersionHash: "cccc"},
	}},
	{GroupVersion: "metrics.k8s.io/v1beta1", APIResources: []metav1.APIResource{ // aggregated: no hash
		{Name: "nodes", SingularName: "", Kind: "NodeMetrics", Verbs: metav1.Verbs{"get", "list"}},
		{Name: "things", SingularName: "thing", Namespaced: true, Kind: "Thing", Verbs: rw},
	}},
}

func names(rs []Resource) string {
	var n []string
	for _, r := range rs {
		n = append(n, r.Name())
	}
	return strings.Join(n, ",")
}

func TestSelect(t *testing.T) {
	all := ResourcesFrom(discovered)
	for _, r := range all {
		if strings.Contains(r.Resource, "/") {
			t.Fatalf("subresource %s kept", r.Name())
		}
	}
	if w := all[0]; w.Name() != "bindings" {
		t.Errorf("not sorted by name: %s first", w.Name())
	}

	for _, tc := range []struct {
		in   []string
		want string
		r0   Resource
	}{
		{[]string{"configmaps"}, "configmaps", Resource{Group: "", Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true}},
		{[]string{"cm", "ConfigMap", "configmap", " configmaps "}, "configmaps", Resource{}},
		{[]string{"deployments"}, "deployments.apps", Resource{Group: "apps", Version: "v1", Resource: "deployments", Kind: "Deployment", Namespaced: true}},
		{[]string{"deploy", "deployments.apps", "Deployments.Apps"}, "deployments.apps", Resource{}},
		{[]string{"widgets.example.com", "wd", "widgets.other.io"}, "widgets.example.com,widgets.other.io", Resource{Version: "v2"}},
		{[]string{"events"}, "events", Resource{}}, // the core group first
		{[]string{"events.events.k8s.io"}, "events.events.k8s.io", Resource{}},
		{[]string{"gadgets", "namespaces", "ns"}, "gadgets.other.io,namespaces", Resource{}},
	} {
		got, err := Select(all, tc.in)
		if err != nil {
			t.Errorf("%v: %v", tc.in, err)
			continue
		}
		if names(got) != tc.want {
			t.Errorf("%v: %s, want %s", tc.in, names(got), tc.want)
		}
		if tc.r0.Resource != "" && (got[0].Group != tc.r0.Group || got[0].Version != tc.r0.Version || got[0].Kind != tc.r0.Kind ||
			got[0].Namespaced != tc.r0.Namespaced || got[0].StorageVersionHash == "") {
			t.Errorf("%v: %+v", tc.in, got[0])
		}
		if tc.r0.Version != "" && got[0].Version != tc.r0.Version {
			t.Errorf("%v: version %s", tc.in, got[0].Version)
		}
	}

	for _, tc := range []struct {
		in   []string
		want []string
	}{
		{[]string{"confgmaps"}, []string{`unknown resource "confgmaps" (did you mean configmaps?)`, "nothing was migrated"}},
		{[]string{"deploymnts.apps"}, []string{`unknown resource "deploymnts.apps" (did you mean deployments.apps?)`}},
		{[]string{"widget.example.org"}, []string{`unknown resource "widget.example.org" (did you mean widgets.example.com`}},
		{[]string{"frobnicators"}, []string{`unknown resource "frobnicators"; nothing was migrated (kubectl api-resources`}},
		{[]string{"widgets"}, []string{`"widgets" is served by several groups: name one of widgets.example.com, widgets.other.io`}},
		{[]string{"tokenreviews"}, []string{"tokenreviews.authentication.k8s.io cannot be migrated: the API server allows only create on it"}},
		{[]string{"componentstatuses"}, []string{"componentstatuses cannot be migrated"}},
		{[]string{"configmaps", "confgmaps", "podz"}, []string{`unknown resource "confgmaps"`, `unknown resource "podz" (did you mean pods`}},
	} {
		got, err := Select(all, tc.in)
		if err == nil {
			t.Errorf("%v: selected %s, want an error", tc.in, names(got))
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not say %q", tc.in, err, w)
			}
		}
	}

	sel, ex := SelectAll(all)
	if got := names(sel); got != "configmaps,deployments.apps,gadgets.other.io,namespaces,pods,widgets.example.com,widgets.other.io" {
		t.Errorf("--all selects %s", got)
	}
	reasons := map[string]string{}
	for _, e := range ex {
		reasons[e.Resource] = e.Reason
	}
	if len(ex) != 3 || !strings.Contains(reasons["events"], "expire") || !strings.Contains(reasons["events.events.k8s.io"], "expire") ||
		!strings.Contains(reasons["things.metrics.k8s.io"], "aggregated") {
		t.Errorf("--all excludes %+v", ex)
	}
}

func TestMissingRightsError(t *testing.T) {
	err := missingRightsError("nobody", "/tmp/kc", []MissingRight{{"list", "configmaps"}, {"update", "configmaps"}, {"update", "widgets.example.com"}})
	want := `user "nobody" (kubeconfig /tmp/kc) may not list configmaps, update configmaps, update widgets.example.com (in all namespaces)`
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "nothing was migrated") {
		t.Errorf("%v\nwant it to contain %s", err, want)
	}
	if err := missingRightsError("", "/tmp/kc", []MissingRight{{"get", "pods"}}); !strings.HasPrefix(err.Error(), "the credentials of /tmp/kc may not get pods (in all namespaces)") {
		t.Errorf("%v", err)
	}
}
