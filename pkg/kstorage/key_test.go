package kstorage

import "testing"

func TestParseKey(t *testing.T) {
	tests := []struct {
		prefix, key string
		want        Key
		ok          bool
	}{
		{"/registry", "/registry/configmaps/default/foo", Key{"configmaps", "configmaps", "default", "foo"}, true},
		{"/registry", "/registry/namespaces/kube-system", Key{"namespaces", "namespaces", "", "kube-system"}, true},
		{"/registry", "/registry/services/specs/default/kubernetes", Key{"services", "services/specs", "default", "kubernetes"}, true},
		{"/registry", "/registry/services/endpoints/default/kubernetes", Key{"endpoints", "services/endpoints", "default", "kubernetes"}, true},
		{"/registry", "/registry/minions/node-1", Key{"nodes", "minions", "", "node-1"}, true},
		{"/registry", "/registry/controllers/ns/rc", Key{"replicationcontrollers", "controllers", "ns", "rc"}, true},
		{"/registry", "/registry/ingress/ns/web", Key{"ingresses", "ingress", "ns", "web"}, true},
		{"/registry", "/registry/podsecuritypolicy/restricted", Key{"podsecuritypolicies", "podsecuritypolicy", "", "restricted"}, true},
		{"/registry", "/registry/deployments/ns/d.with.dots", Key{"deployments", "deployments", "ns", "d.with.dots"}, true},
		{"/registry", "/registry/events/ns/pod.17a2b", Key{"events", "events", "ns", "pod.17a2b"}, true},
		{"/registry", "/registry/apiregistration.k8s.io/apiservices/v1.apps", Key{"apiservices.apiregistration.k8s.io", "apiregistration.k8s.io/apiservices", "", "v1.apps"}, true},
		{"/registry", "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com",
			Key{"customresourcedefinitions.apiextensions.k8s.io", "apiextensions.k8s.io/customresourcedefinitions", "", "widgets.example.com"}, true},
		{"/registry", "/registry/example.com/widgets/team-a/w1", Key{"widgets.example.com", "example.com/widgets", "team-a", "w1"}, true},
		{"/registry", "/registry/example.com/clusterwidgets/w1", Key{"clusterwidgets.example.com", "example.com/clusterwidgets", "", "w1"}, true},
		{"/registry", "/registry/masterleases/10.0.0.1", Key{"masterleases", "masterleases", "", "10.0.0.1"}, true},
		{"/registry", "/registry/ranges/serviceips", Key{"ranges", "ranges", "", "serviceips"}, true},
		{"/custom", "/custom/pods/ns/p", Key{"pods", "pods", "ns", "p"}, true},
		{"", "/pods/ns/p", Key{"pods", "pods", "ns", "p"}, true},
		// not objects
		{"/registry", "/registry/health", Key{}, false},
		{"/registry", "/registry/", Key{}, false},
		{"/registry", "/registry", Key{}, false},
		{"/registry", "compact_rev_key", Key{}, false},
		{"/registry", "/registryx/pods/ns/p", Key{}, false},
		{"/registry", "/registry/configmaps//foo", Key{}, false},
		{"/registry", "/registry/configmaps/ns/", Key{}, false},
		{"/registry", "/registry/a/b/c/d", Key{}, false},
		{"/registry", "/registry/example.com/widgets", Key{}, false},
		{"/registry", "/registry/services/specs", Key{}, false},
		{"/registry", "/registry/example.com/widgets/a/b/c", Key{}, false},
		{"/registry", "/registry/a/b/c/d/e/f/g", Key{}, false},
		{"/custom", "/registry/pods/ns/p", Key{}, false},
	}
	for _, tc := range tests {
		got, ok := ParseKey(tc.prefix, []byte(tc.key))
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParseKey(%q, %q) = %+v, %v; want %+v, %v", tc.prefix, tc.key, got, ok, tc.want, tc.ok)
		}
	}
}

func TestNormalizePrefix(t *testing.T) {
	for in, want := range map[string]string{"/registry": "/registry", "/registry/": "/registry", "/": "", "": "", "/a//": "/a"} {
		if got := NormalizePrefix(in); got != want {
			t.Errorf("NormalizePrefix(%q) = %q, want %q", in, got, want)
		}
	}
}
