package cluster

import (
	"fmt"
	"strings"

	"github.com/etcd-steward/steward/pkg/pki"
)

// Env returns the shell exports that point etcdctl at the cluster.
func (c *Cluster) Env() string {
	var b strings.Builder
	fmt.Fprintf(&b, "export ETCDCTL_ENDPOINTS=%s\n", strings.Join(c.Spec.ClientURLs(), ","))
	if !c.Spec.TLS.Disabled {
		f := pki.FilesIn(c.CertDir())
		fmt.Fprintf(&b, "export ETCDCTL_CACERT=%s\n", f.CA)
		fmt.Fprintf(&b, "export ETCDCTL_CERT=%s\n", f.ClientCert)
		fmt.Fprintf(&b, "export ETCDCTL_KEY=%s\n", f.ClientKey)
	}
	return b.String()
}
