package cluster

import (
	"fmt"
	"strings"
)

// Env returns the shell exports that point etcdctl at the cluster.
func (c *Cluster) Env() string {
	var b strings.Builder
	fmt.Fprintf(&b, "export ETCDCTL_ENDPOINTS=%s\n", strings.Join(c.Spec.ClientURLs(), ","))
	if !c.Spec.TLS.Disabled {
		ca, cert, key := c.clientFiles()
		fmt.Fprintf(&b, "export ETCDCTL_CACERT=%s\n", ca)
		fmt.Fprintf(&b, "export ETCDCTL_CERT=%s\n", cert)
		fmt.Fprintf(&b, "export ETCDCTL_KEY=%s\n", key)
	}
	return b.String()
}
