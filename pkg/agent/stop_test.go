package agent

import (
	"strings"
	"testing"
)

func TestLeadsFromMetrics(t *testing.T) {
	for _, tc := range []struct {
		name      string
		metrics   string
		leads, ok bool
	}{
		{"follower", "# HELP etcd_server_is_leader Whether or not this member is a leader.\n# TYPE etcd_server_is_leader gauge\netcd_server_is_leader 0\n", false, true},
		{"leader", "etcd_server_has_leader 1\netcd_server_is_leader 1\n", true, true},
		{"learner of another metric name first", "etcd_server_is_learner 1\netcd_server_is_leader 0\n", false, true},
		{"absent", "etcd_server_has_leader 1\n", false, false},
		{"unreadable", "etcd_server_is_leader yes\n", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leads, ok := leadsFromMetrics(strings.NewReader(tc.metrics))
			if leads != tc.leads || ok != tc.ok {
				t.Errorf("leadsFromMetrics = %v, %v; want %v, %v", leads, ok, tc.leads, tc.ok)
			}
		})
	}
}
