package localkube

import (
	"net/netip"
	"strings"
	"testing"
)

func TestDNSAddresses(t *testing.T) {
	if DNSServiceIP != "10.96.0.10" || APIServiceIP != "10.96.0.1" {
		t.Errorf("DNS Service %s, API Service %s; kubeadm's are 10.96.0.10 and 10.96.0.1 for %s", DNSServiceIP, APIServiceIP, serviceCIDR)
	}
}

// TestUpstream: forward goes to the node's resolv.conf when no nameserver
// there is loopback, to the others by address when some are (CoreDNS
// itself would answer on them: a loop), nowhere when none is left.
func TestUpstream(t *testing.T) {
	for _, tc := range []struct{ conf, want string }{
		{"nameserver 10.255.255.53\n", "/etc/resolv.conf"},
		{"search example.com\nnameserver 192.0.2.1\nnameserver 2001:db8::1\noptions ndots:2\n", "/etc/resolv.conf"},
		{"nameserver 127.0.0.53\noptions edns0\n", ""},
		{"nameserver 127.0.0.1\nnameserver 192.0.2.1\nnameserver ::1\n", "192.0.2.1"},
		{"nameserver 0.0.0.0\n", ""},
		{"", ""},
		{"# nameserver 192.0.2.1\nnameserver not-an-address\n", ""},
	} {
		if got := Upstream([]byte(tc.conf)); got != tc.want {
			t.Errorf("%q: upstream %q, want %q", tc.conf, got, tc.want)
		}
	}
}

// TestCorefile: kubeadm's Corefile; without upstreams, neither forward nor
// loop.
func TestCorefile(t *testing.T) {
	with := Corefile("/etc/resolv.conf")
	for _, want := range []string{
		"kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n",
		"forward . /etc/resolv.conf {", "    loop\n", "disable success cluster.local", "prometheus :9153", "health {\n       lameduck 5s",
	} {
		if !strings.Contains(with, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, with)
		}
	}
	without := Corefile("")
	for _, no := range []string{"forward", "loop"} {
		if strings.Contains(without, no) {
			t.Errorf("Corefile without upstreams has %s:\n%s", no, without)
		}
	}
	if strings.Count(without, "{") != strings.Count(without, "}") {
		t.Errorf("unbalanced:\n%s", without)
	}
}

// FuzzUpstream: resolv.conf is read from disk; whatever it holds, the
// upstream is "", /etc/resolv.conf, or addresses none of which is loopback.
func FuzzUpstream(f *testing.F) {
	f.Add([]byte("nameserver 127.0.0.53\nnameserver 192.0.2.1\n"))
	f.Add([]byte("nameserver ::ffff:127.0.0.1\n"))
	f.Fuzz(func(t *testing.T, conf []byte) {
		up := Upstream(conf)
		if up == "" || up == "/etc/resolv.conf" {
			return
		}
		for _, a := range strings.Split(up, " ") {
			ip, err := netip.ParseAddr(a)
			if err != nil || ip.IsLoopback() || ip.IsUnspecified() {
				t.Fatalf("upstream %q from %q", up, conf)
			}
		}
	})
}
