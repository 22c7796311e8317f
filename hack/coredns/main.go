// Command coredns is CoreDNS with only the plugins a kubeadm cluster's
// Corefile uses (and log), for the cluster DNS of a local Kubernetes
// (docs/kubernetes-local.md). hack/build-coredns.sh builds it against the
// CoreDNS release of each Kubernetes version: it copies this file into a
// wrapper module that requires github.com/coredns/coredns at that version.
//
// Upstream's main (github.com/coredns/coredns/core/plugin) links every
// in-tree plugin, the cloud DNS ones (route53, azure, clouddns) with their
// SDKs among them; a local cluster needs none of them, and they would
// multiply the cold build's downloads and compile time.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins of kubeadm's Corefile (cmd/kubeadm/app/phases/addons/dns),
	// plus log for debugging a query by hand.
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// linked names the directives of the plugins imported above (metrics is
// the prometheus directive).
var linked = map[string]bool{
	"cache": true, "errors": true, "forward": true, "health": true,
	"kubernetes": true, "loadbalance": true, "log": true, "loop": true,
	"prometheus": true, "ready": true, "reload": true,
}

func init() {
	// Keep the release's order of execution (its plugin.cfg), only the
	// directives linked in: an unlinked one would be accepted by the parser
	// and then fail at setup.
	var ds []string
	for _, d := range dnsserver.Directives {
		if linked[d] {
			ds = append(ds, d)
		}
	}
	dnsserver.Directives = ds
}

func main() {
	coremain.Run()
}
