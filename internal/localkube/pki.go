package localkube

// Certificates and kubeconfigs in kubeadm's layout: the cluster's CAs and
// service-account keys are made once (DIR/pki) and copied into each node's
// /etc/kubernetes/pki; each node's leaves and kubeconfigs are its own.
// ECDSA P-256 throughout (kubeadm's encryptionAlgorithm ECDSA-P256): fast
// to make, and what a Kubernetes of these versions accepts everywhere.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certValidity is every certificate's lifetime: a local cluster lives for
// a session, a year is kubeadm's leaf lifetime.
const certValidity = 365 * 24 * time.Hour

type keyPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

func serialNumber() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func newCA(cn string) (keyPair, error) {
	key, err := newKey()
	if err != nil {
		return keyPair{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serialNumber(), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return keyPair{}, err
	}
	cert, err := x509.ParseCertificate(der)
	return keyPair{cert, key}, err
}

// leaf issues a certificate signed by ca: a client one when dns and ips are
// empty, else a serving one for them.
func (ca keyPair) leaf(cn string, orgs []string, dns []string, ips []string) (keyPair, error) {
	key, err := newKey()
	if err != nil {
		return keyPair{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serialNumber(), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:    dns,
	}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	if len(dns) > 0 || len(ips) > 0 {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return keyPair{}, err
	}
	cert, err := x509.ParseCertificate(der)
	return keyPair{cert, key}, err
}

func (k keyPair) certPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: k.cert.Raw})
}

func (k keyPair) keyPEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k.key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// write writes dir/name.crt (0644) and dir/name.key (0600).
func (k keyPair) write(dir, name string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	kp, err := k.keyPEM()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), k.certPEM(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), kp, 0o600)
}

// clusterPKI is what every node shares.
type clusterPKI struct {
	ca, frontProxyCA keyPair
	sa               *ecdsa.PrivateKey
}

// makePKI makes the cluster's CAs, service-account key and the admin's
// kubeconfig (DIR/kubeconfig), and each node's PKI and kubeconfigs under
// its /etc/kubernetes.
func (c *Cluster) makePKI() error {
	var p clusterPKI
	var err error
	if p.ca, err = newCA("kubernetes"); err != nil {
		return err
	}
	if p.frontProxyCA, err = newCA("front-proxy-ca"); err != nil {
		return err
	}
	if p.sa, err = newKey(); err != nil {
		return err
	}
	dir := filepath.Join(c.Dir, "pki")
	if err := p.ca.write(dir, "ca"); err != nil {
		return err
	}
	if err := p.frontProxyCA.write(dir, "front-proxy-ca"); err != nil {
		return err
	}
	// One node: its API server. Three: the load balancer in front of them
	// (lb.go), on the bridge's address.
	c.APIServer = fmt.Sprintf("https://%s:%d", c.Nodes[0].Addr, apiPort)
	if len(c.Nodes) > 1 {
		c.APIServer = fmt.Sprintf("https://%s:%d", c.Gateway, apiPort)
	}
	admin, err := p.ca.leaf("kubernetes-admin", []string{"system:masters"}, nil, nil)
	if err != nil {
		return err
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	if err := writeKubeconfig(c.Kubeconfig, c.APIServer, p.ca, admin, "kubernetes-admin"); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := c.nodePKI(n, p); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	return nil
}

// etcKubernetes is the node's /etc/kubernetes as the machine sees it: the
// upper layer of the node's /etc overlay.
func (n *Node) etcKubernetes() string {
	return filepath.Join(n.Dir, "root", "etc", "upper", "kubernetes")
}

func (c *Cluster) nodePKI(n *Node, p clusterPKI) error {
	ek := n.etcKubernetes()
	pk := filepath.Join(ek, "pki")
	if err := p.ca.write(pk, "ca"); err != nil {
		return err
	}
	if err := p.frontProxyCA.write(pk, "front-proxy-ca"); err != nil {
		return err
	}
	saDER, err := x509.MarshalECPrivateKey(p.sa)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&p.sa.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(pk, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER}), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(pk, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		return err
	}
	ips := []string{"10.96.0.1", n.Addr, "127.0.0.1", c.Gateway}
	for _, o := range c.Nodes {
		if o != n {
			ips = append(ips, o.Addr)
		}
	}
	serving, err := p.ca.leaf("kube-apiserver", nil,
		[]string{n.Name, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}, ips)
	if err != nil {
		return err
	}
	for _, l := range []struct {
		name string
		ca   keyPair
		cn   string
		orgs []string
		kp   *keyPair
	}{
		{"apiserver-kubelet-client", p.ca, "kube-apiserver-kubelet-client", []string{"system:masters"}, nil},
		{"front-proxy-client", p.frontProxyCA, "front-proxy-client", nil, nil},
	} {
		kp, err := l.ca.leaf(l.cn, l.orgs, nil, nil)
		if err != nil {
			return err
		}
		if err := kp.write(pk, l.name); err != nil {
			return err
		}
	}
	if err := serving.write(pk, "apiserver"); err != nil {
		return err
	}
	local := fmt.Sprintf("https://%s:%d", n.Addr, apiPort)
	for _, kc := range []struct {
		file, cn, user, server string
		orgs                   []string
	}{
		{"admin.conf", "kubernetes-admin", "kubernetes-admin", local, []string{"system:masters"}},
		{"super-admin.conf", "kubernetes-super-admin", "kubernetes-super-admin", local, []string{"system:masters"}},
		{"controller-manager.conf", "system:kube-controller-manager", "system:kube-controller-manager", local, nil},
		{"scheduler.conf", "system:kube-scheduler", "system:kube-scheduler", local, nil},
		{"kubelet.conf", "system:node:" + n.Name, "system:node:" + n.Name, c.APIServer, []string{"system:nodes"}},
		{"kube-proxy.conf", "system:kube-proxy", "system:kube-proxy", c.APIServer, nil},
	} {
		kp, err := p.ca.leaf(kc.cn, kc.orgs, nil, nil)
		if err != nil {
			return err
		}
		if err := writeKubeconfig(filepath.Join(ek, kc.file), kc.server, p.ca, kp, kc.user); err != nil {
			return err
		}
	}
	return os.MkdirAll(filepath.Join(ek, "manifests"), 0o700)
}

// writeKubeconfig writes a kubeconfig (0600) with the client's certificate
// and key inline, as kubeadm's.
func writeKubeconfig(path, server string, ca, client keyPair, user string) error {
	kp, err := client.keyPEM()
	if err != nil {
		return err
	}
	b64 := base64.StdEncoding.EncodeToString
	doc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: %s
    server: %s
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: %s
  name: %s@kubernetes
current-context: %s@kubernetes
preferences: {}
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
`, b64(ca.certPEM()), server, user, user, user, user, b64(client.certPEM()), b64(kp))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(doc), 0o600)
}
