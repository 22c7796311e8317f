package agent

import (
	"strings"
	"testing"
)

func TestParseMetrics(t *testing.T) {
	const grpc = `grpc_server_started_total{grpc_method="Put",grpc_service="etcdserverpb.KV",grpc_type="unary"} 10
grpc_server_started_total{grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"} 3
grpc_server_handled_total{grpc_code="OK",grpc_method="Put",grpc_service="etcdserverpb.KV",grpc_type="unary"} 7
grpc_server_handled_total{grpc_code="Unavailable",grpc_method="Put",grpc_service="etcdserverpb.KV",grpc_type="unary"} 1
grpc_server_handled_total{grpc_code="OK",grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"} 0
`
	for _, tc := range []struct {
		name    string
		metrics string
		want    memberMetrics
		err     bool
	}{
		{"follower", "# HELP etcd_server_is_leader Whether or not this member is a leader.\n# TYPE etcd_server_is_leader gauge\netcd_server_is_leader 0\n", memberMetrics{leaderKnown: true}, false},
		{"leader", "etcd_server_has_leader 1\netcd_server_is_leader 1\n", memberMetrics{leads: true, leaderKnown: true}, false},
		{"another metric of the same prefix", "etcd_server_is_learner 1\netcd_server_is_leader 0\n", memberMetrics{leaderKnown: true}, false},
		{"absent", "etcd_server_has_leader 1\n", memberMetrics{}, false},
		{"unreadable", "etcd_server_is_leader yes\n", memberMetrics{}, true},
		{"unary requests in flight; streams not counted", "etcd_server_is_leader 0\n" + grpc, memberMetrics{leaderKnown: true, inFlightUnary: 2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMetrics(strings.NewReader(tc.metrics))
			if (err != nil) != tc.err {
				t.Fatalf("parseMetrics error %v, want error %v", err, tc.err)
			}
			if err == nil && got != tc.want {
				t.Errorf("parseMetrics = %+v, want %+v", got, tc.want)
			}
		})
	}
}
