package operator

import (
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// The manager's cache holds only the Secrets (and the other watched
// kinds) the operator made; Secrets, claims, ServiceAccounts, Roles,
// RoleBindings and Leases are read uncached.
func TestCacheOptionsOwnSecretsOnly(t *testing.T) {
	ec := testCluster()
	co, cl := cacheOptions("")
	var secretSel labels.Selector
	for o, b := range co.ByObject {
		if _, ok := o.(*corev1.Secret); ok {
			secretSel = b.Label
		}
	}
	if secretSel == nil {
		t.Fatal("the cache holds every Secret of the cluster: no label selector for Secrets")
	}
	if !secretSel.Matches(labels.Set(Secret(ec, "db-join", nil).Labels)) {
		t.Errorf("selector %s does not match the operator's own Secrets", secretSel)
	}
	if secretSel.Matches(labels.Set{"app": "other"}) || secretSel.Matches(labels.Set{}) {
		t.Errorf("selector %s matches other applications' Secrets", secretSel)
	}
	if len(co.ByObject) != 4 {
		t.Errorf("cache by object: %d kinds, want the 4 watched ones (Secret, StatefulSet, Service, PodDisruptionBudget)", len(co.ByObject))
	}
	if cl.Cache == nil {
		t.Fatal("no client cache options: every read goes through the cache")
	}
	kinds := map[string]bool{}
	for _, o := range cl.Cache.DisableFor {
		kinds[typeName(o)] = true
	}
	for _, k := range []string{"Secret", "PersistentVolumeClaim", "ServiceAccount", "Role", "RoleBinding", "Lease"} {
		if !kinds[k] {
			t.Errorf("%s is read through the cache (cluster-wide list and watch): want it uncached", k)
		}
	}
	if co, _ := cacheOptions("prod"); len(co.DefaultNamespaces) != 1 {
		t.Errorf("namespace prod: default namespaces %v", co.DefaultNamespaces)
	}
}

func typeName(o client.Object) string {
	t := reflect.TypeOf(o)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}

// The ClusterRole make generate writes grants what the code uses: no
// delete, patch or deletecollection anywhere, no list or watch on the
// kinds read uncached, nothing on pods (the operator's own pod is read
// through the Role of its namespace).
func TestClusterRoleLeastPrivilege(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "deploy", "operator", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(b, &role); err != nil {
		t.Fatal(err)
	}
	uncachedRes := map[string]bool{"persistentvolumeclaims": true, "serviceaccounts": true, "roles": true, "rolebindings": true, "leases": true}
	for _, r := range role.Rules {
		for _, v := range r.Verbs {
			if v == "delete" || v == "patch" && !slices.Contains(r.Resources, "events") || v == "deletecollection" || v == "*" {
				t.Errorf("the ClusterRole grants %s on %v", v, r.Resources)
			}
			for _, res := range r.Resources {
				if uncachedRes[res] && (v == "list" || v == "watch") {
					t.Errorf("the ClusterRole grants %s on %s, which the operator reads uncached", v, res)
				}
				if res == "pods" {
					t.Errorf("the ClusterRole grants %s on pods", v)
				}
				if res == "etcdclusters" && v != "get" && v != "list" && v != "watch" {
					t.Errorf("the ClusterRole grants %s on etcdclusters: the operator writes only their status", v)
				}
			}
		}
	}
}
