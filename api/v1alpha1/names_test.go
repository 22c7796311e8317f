package v1alpha1_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The names users script against (issue 29, deliverable 5, and the status
// fields it lists): renaming one breaks them, so a rename fails here.
var scriptedPaths = []string{
	"spec.replicas", "spec.version",
	"spec.backup.s3.endpoint", "spec.backup.s3.bucket", "spec.backup.s3.prefix",
	"spec.backup.s3.region", "spec.backup.s3.credentialsSecret", "spec.backup.s3.caSecret",
	"spec.backup.volume.claimName", "spec.backup.fullSchedule", "spec.backup.retention.keepLast",
	"spec.recovery.mode", "spec.recovery.gracePeriodSeconds", "spec.restoreFrom.s3",
	"spec.storage.size", "spec.storage.storageClassName", "spec.tls.caSecret",
	"spec.pod.resources", "spec.pod.affinity", "spec.pod.topologySpreadConstraints",
	"spec.pod.priorityClassName", "spec.etcd.quotaBackendBytes", "spec.etcd.extraFlags",
	"status.conditions", "status.members[].name", "status.members[].id", "status.members[].role",
	"status.members[].ready", "status.members[].version", "status.members[].reason",
	"status.members[].lastTransitionTime", "status.replicas", "status.selector",
	"status.observedGeneration", "status.version", "status.leader", "status.lastBackupTime",
	"status.lastOperation.type", "status.lastOperation.state",
}

// TestScriptedNames reads the checked-in CRD and fails when a name users
// script against is missing from its schema, or the scale subresource or
// printer columns moved.
func TestScriptedNames(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "operator", "crd", "steward.etcd.io_etcdclusters.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Group    string
			Names    struct{ Kind, Plural string }
			Versions []struct {
				Name         string
				Subresources struct {
					Scale struct{ SpecReplicasPath, StatusReplicasPath, LabelSelectorPath string }
				}
				AdditionalPrinterColumns []struct{ Name string }
				Schema                   struct {
					OpenAPIV3Schema schema
				}
			}
		}
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	if crd.Spec.Group != "steward.etcd.io" || crd.Spec.Names.Kind != "EtcdCluster" || len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != "v1alpha1" {
		t.Fatalf("group %q kind %q versions %+v", crd.Spec.Group, crd.Spec.Names.Kind, crd.Spec.Versions)
	}
	v := crd.Spec.Versions[0]
	if s := v.Subresources.Scale; s.SpecReplicasPath != ".spec.replicas" || s.StatusReplicasPath != ".status.replicas" || s.LabelSelectorPath != ".status.selector" {
		t.Errorf("scale subresource %+v", s)
	}
	var cols []string
	for _, c := range v.AdditionalPrinterColumns {
		cols = append(cols, c.Name)
	}
	if want := []string{"Ready", "Version", "Leader", "Backup", "Age"}; !slices.Equal(cols, want) {
		t.Errorf("printer columns %q, want %q", cols, want)
	}
	for _, p := range scriptedPaths {
		s := &v.Schema.OpenAPIV3Schema
		for part := range strings.SplitSeq(p, ".") {
			name, list := strings.CutSuffix(part, "[]")
			next, ok := s.Properties[name]
			if !ok {
				s = nil
				break
			}
			s = &next
			if list {
				if s.Items == nil {
					s = nil
					break
				}
				s = s.Items
			}
		}
		if s == nil {
			t.Errorf("%s is not in the CRD's schema", p)
		}
	}
}

// schema is the part of an OpenAPI schema TestScriptedNames walks.
type schema struct {
	Properties map[string]schema
	Items      *schema
}
