package kstorage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultRemoved(t *testing.T) {
	c := DefaultRemoved()
	for _, tc := range []struct{ apiVersion, kind, removedIn, replacement string }{
		{"extensions/v1beta1", "Ingress", "1.22", "networking.k8s.io/v1"},
		{"policy/v1beta1", "PodSecurityPolicy", "1.25", ""},
		{"batch/v1beta1", "CronJob", "1.25", "batch/v1"},
		{"autoscaling/v2beta2", "HorizontalPodAutoscaler", "1.26", "autoscaling/v2"},
		{"flowcontrol.apiserver.k8s.io/v1beta2", "FlowSchema", "1.29", "flowcontrol.apiserver.k8s.io/v1"},
		{"flowcontrol.apiserver.k8s.io/v1beta3", "PriorityLevelConfiguration", "1.32", "flowcontrol.apiserver.k8s.io/v1"},
		{"extensions/v1beta1", "Deployment", "1.16", "apps/v1"},
	} {
		r, ok := c.Lookup(tc.apiVersion, tc.kind)
		if !ok || r.RemovedIn != tc.removedIn || tc.replacement != "" && r.Replacement != tc.replacement {
			t.Errorf("%s %s: %+v, %v; want removed in %s, replaced by %s", tc.apiVersion, tc.kind, r, ok, tc.removedIn, tc.replacement)
		}
	}
	for _, gvk := range [][2]string{{"v1", "ConfigMap"}, {"policy/v1", "PodDisruptionBudget"}, {"batch/v1beta1", "Job"}} {
		if r, ok := c.Lookup(gvk[0], gvk[1]); ok {
			t.Errorf("%v listed as removed: %+v", gvk, r)
		}
	}
}

func TestParseRemovedRejects(t *testing.T) {
	for name, doc := range map[string]string{
		"wrong kind":      "kind: VersionCatalogue\nremoved: []\n",
		"unknown field":   "kind: RemovedAPICatalogue\nremoved:\n- apiVersion: a/v1\n  kinds: [A]\n  removedIn: \"1.2\"\n  typo: x\n",
		"bad removedIn":   "kind: RemovedAPICatalogue\nremoved:\n- apiVersion: a/v1\n  kinds: [A]\n  removedIn: soon\n",
		"no kinds":        "kind: RemovedAPICatalogue\nremoved:\n- apiVersion: a/v1\n  removedIn: \"1.2\"\n",
		"bad apiVersion":  "kind: RemovedAPICatalogue\nremoved:\n- apiVersion: a/b/v1\n  kinds: [A]\n  removedIn: \"1.2\"\n",
		"listed twice":    "kind: RemovedAPICatalogue\nremoved:\n- apiVersion: a/v1\n  kinds: [A, A]\n  removedIn: \"1.2\"\n",
		"not yaml at all": "{{{",
	} {
		if _, err := ParseRemoved([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLoadRemovedOverride(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, RemovedFileName)
	c, err := LoadRemoved(p)
	if err != nil || len(c.Removed) == 0 {
		t.Fatalf("no override: %v, %d entries", err, len(c.Removed))
	}
	doc := "apiVersion: steward.etcd.io/v1alpha1\nkind: RemovedAPICatalogue\nremoved:\n- apiVersion: example.com/v1\n  kinds: [Widget]\n  removedIn: \"1.40\"\n  replacement: example.com/v2\n"
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = LoadRemoved(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Lookup("example.com/v1", "Widget"); !ok || len(c.Removed) != 1 {
		t.Errorf("override not used: %+v", c)
	}
	if err := os.WriteFile(p, []byte("kind: Nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadRemoved(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("bad override: %v, want an error naming %s", err, p)
	}
}

func TestParseMinor(t *testing.T) {
	for in, want := range map[string][2]int{"1.32": {1, 32}, "v1.25": {1, 25}, "1.36.3": {1, 36}, "v1.33.0-rc.1": {1, 33}} {
		ma, mi, err := ParseMinor(in)
		if err != nil || ma != want[0] || mi != want[1] {
			t.Errorf("ParseMinor(%q) = %d, %d, %v", in, ma, mi, err)
		}
	}
	for _, in := range []string{"", "1", "one.two", "1.x", "1.2.x", "-1.2"} {
		if _, _, err := ParseMinor(in); err == nil {
			t.Errorf("ParseMinor(%q) accepted", in)
		}
	}
}

func TestCheckRemoved(t *testing.T) {
	inv := NewInventory("/registry")
	add := func(key string, v []byte) { inv.Add([]byte(key), v) }
	add("/registry/cronjobs/ns/a", protoEnvelope("batch/v1beta1", "CronJob", nil))
	add("/registry/cronjobs/ns/b", protoEnvelope("batch/v1beta1", "CronJob", nil))
	add("/registry/cronjobs/ns/c", protoEnvelope("batch/v1", "CronJob", nil))
	add("/registry/horizontalpodautoscalers/ns/h", protoEnvelope("autoscaling/v2beta2", "HorizontalPodAutoscaler", nil))
	add("/registry/secrets/ns/s", []byte("k8s:enc:aescbc:v1:k:xx"))
	add("/registry/configmaps/ns/junk", []byte("junk"))

	for _, tc := range []struct {
		version   string
		objects   int64
		uses      int
		unchecked int64
	}{
		{"1.24", 0, 0, 2},
		{"1.25", 2, 1, 2},
		{"v1.26.1", 3, 2, 2},
	} {
		rep := inv.Report(Source{Type: "snapshot"})
		if err := rep.CheckRemoved(DefaultRemoved(), tc.version); err != nil {
			t.Fatal(err)
		}
		rc := rep.RemovedAPIs
		if rc.Objects != tc.objects || len(rc.Uses) != tc.uses || rc.UncheckedObjects != tc.unchecked {
			t.Errorf("%s: %+v, want %d objects in %d uses, %d unchecked", tc.version, rc, tc.objects, tc.uses, tc.unchecked)
		}
		for _, r := range rep.Resources {
			for _, v := range r.Versions {
				flagged := v.RemovedIn != ""
				want := v.APIVersion == "batch/v1beta1" && tc.objects >= 2 || v.APIVersion == "autoscaling/v2beta2" && tc.objects == 3
				if flagged != want {
					t.Errorf("%s: %s %s flagged %v, want %v", tc.version, r.Resource, v.APIVersion, flagged, want)
				}
			}
		}
	}
	rep := inv.Report(Source{})
	if err := rep.CheckRemoved(DefaultRemoved(), "latest"); err == nil {
		t.Error("a malformed Kubernetes version was accepted")
	}
}
