package status

import (
	"github.com/etcd-steward/steward/pkg/cluster"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestCertificatesCondition: False naming the certificates that expired or
// expire within the window (default 30 days; the spec's expiryWarning), that
// cannot be read or are served unsigned by the CA; a member that does not
// answer is left to the other conditions.
func TestCertificatesCondition(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ok := func(name string, left time.Duration) pki.CertInfo {
		return pki.CertInfo{Name: name, File: "/p/" + name + ".crt", Serial: "1", NotAfter: now.Add(left)}
	}
	caInfo := func(left time.Duration) pki.CertInfo {
		ci := ok("ca", left)
		ci.IsCA, ci.Subject = true, "c1-ca"
		return ci
	}
	for _, tt := range []struct {
		name   string
		tls    spec.TLS
		inv    []pki.CertInfo
		status string
		reason string
		msg    string
	}{
		{"all valid", spec.TLS{}, []pki.CertInfo{ok("ca", 3000*24*time.Hour), ok("server", 200*24*time.Hour)}, "True", "CertificatesValid", "2 certificates valid; the next to expire is server in 4800h"},
		{"within the default 30 days", spec.TLS{}, []pki.CertInfo{ok("server", 200*24*time.Hour), ok("clients/kube-apiserver", 10*24*time.Hour)}, "False", "CertificateExpiringSoon", "expires within 720h0m0s: clients/kube-apiserver (in 240h0m0s)"},
		{"configured window", spec.TLS{ExpiryWarning: "2400h"}, []pki.CertInfo{ok("server", 90*24*time.Hour)}, "False", "CertificateExpiringSoon", "server (in 2160h0m0s)"},
		{"expired", spec.TLS{}, []pki.CertInfo{ok("peer", -time.Hour), ok("client", time.Hour)}, "False", "CertificateExpired", "expired: peer (1h0m0s ago); expires within 720h0m0s: client (in 1h0m0s)"},
		{"unreadable file", spec.TLS{}, []pki.CertInfo{{Name: "agent", File: "/p/agent.crt", Error: "does not parse"}}, "False", "CertificateUnreadable", "cannot be read: agent (does not parse)"},
		{"served by another CA", spec.TLS{}, []pki.CertInfo{{Name: "member etcd-1 client", Endpoint: "a:1", Serial: "2", NotAfter: now.Add(9000 * time.Hour), Error: "unknown authority"}}, "False", "CertificateNotTrusted", "member etcd-1 client (unknown authority)"},
		{"served expired", spec.TLS{}, []pki.CertInfo{{Name: "member etcd-1 peer", Endpoint: "a:2", Serial: "3", NotAfter: now.Add(-time.Minute), Error: "certificate has expired"}}, "False", "CertificateExpired", "expired: member etcd-1 peer (1m0s ago)"},
		{"member down ignored", spec.TLS{}, []pki.CertInfo{ok("server", 9000*time.Hour), {Name: "member etcd-1 client", Endpoint: "a:1", Error: "connection refused"}}, "True", "CertificatesValid", ""},
		// A CA that expires within the renewal margin (a third of a year
		// by default): the leaves end with it and are no longer renewed
		// (pki.AtCALimit), so the condition says to rotate it.
		{"CA within the renewal margin", spec.TLS{}, []pki.CertInfo{caInfo(100 * 24 * time.Hour), ok("server", 100*24*time.Hour-time.Minute)}, "False", "CAExpiresSoon",
			`the CA expires within the renewal margin of 2920h0m0s: ca "c1-ca" (in 2400h0m0s); the certificates it issues end with it and can no longer be renewed: rotate the CA`},
		{"CA within the renewal margin and the window", spec.TLS{}, []pki.CertInfo{caInfo(10 * 24 * time.Hour), ok("server", 10*24*time.Hour-time.Minute)}, "False", "CertificateExpiringSoon",
			`expires within 720h0m0s: ca (in 240h0m0s), server (in 239h59m0s); the CA expires within the renewal margin`},
		{"CA beyond the renewal margin", spec.TLS{}, []pki.CertInfo{caInfo(200 * 24 * time.Hour), ok("server", 200*24*time.Hour-time.Minute)}, "True", "CertificatesValid", ""},
		{"TLS off", spec.TLS{Disabled: true}, nil, "True", "TLSDisabled", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &cluster.Cluster{Spec: &spec.Cluster{TLS: tt.tls}}
			got := CertificatesCondition(c, tt.inv, now)
			if got.Type != CondCertificatesReady || got.Status != tt.status || got.Reason != tt.reason || !strings.Contains(got.Message, tt.msg) {
				t.Fatalf("got %+v, want %s %s containing %q", got, tt.status, tt.reason, tt.msg)
			}
		})
	}
}
