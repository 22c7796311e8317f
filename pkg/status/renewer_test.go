package status

import (
	"testing"

	"github.com/etcd-steward/steward/pkg/cluster/clustertest"
)

// TestNeedsRenewer: only the coordinator of a multi-host cluster (the CA
// key here, TLS on) with no member on this machine's agent needs a
// renewal process of its own.
func TestNeedsRenewer(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		local, caKey, tlsOff bool
		singleHost           bool
		want                 bool
	}{
		{name: "coordinator without a local agent", caKey: true, want: true},
		{name: "coordinator with a local member (its agent's loop renews)", local: true, caKey: true},
		{name: "no CA key (a joined host's directory)"},
		{name: "TLS off", caKey: true, tlsOff: true},
		{name: "single host", caKey: true, singleHost: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clustertest.MultiHost(t, tc.local, tc.caKey)
			c.Spec.TLS.Disabled = tc.tlsOff
			if tc.singleHost {
				c.Spec.Agents = c.Spec.Agents[:1]
			}
			if got := NeedsRenewer(c); got != tc.want {
				t.Errorf("NeedsRenewer() = %v, want %v", got, tc.want)
			}
		})
	}
}
