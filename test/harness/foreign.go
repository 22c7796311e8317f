package harness

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/pkg/pki"
)

// ForeignCluster is an etcd cluster Steward did not create: the real etcd
// binary of one version from the test store, started by the test with
// plain flags and certificates of its own CA (made here with Go's crypto,
// not pkg/pki), as an operator or a distribution would run it. It is the
// starting point of `steward attach` and `steward adopt` tests. Its
// fields never change after StartForeignCluster; each member's process
// state is behind the member's own lock.
type ForeignCluster struct {
	TB testing.TB
	// Dir holds everything the cluster has: pki/, one directory per member.
	Dir string
	// Version is the etcd version every member runs.
	Version string
	// Token is the --initial-cluster-token.
	Token string
	// CAFile, CertFile and KeyFile are a client certificate of the
	// cluster's CA (and the CA), as an operator would hand to etcdctl.
	CAFile, CertFile, KeyFile string
	// CAKeyFile is the CA's private key (adopt may be given it).
	CAKeyFile string
	// Addr is the loopback address its members listen on
	// (LoopbackAddr; a sibling shares it); its certificates cover it.
	Addr    string
	Members []*ForeignMember
}

// ForeignMember is one member of a ForeignCluster.
type ForeignMember struct {
	Name      string
	ClientURL string
	PeerURL   string
	// DataDir is the member's --data-dir.
	DataDir string
	// Cmdline is the exact command line the member runs with (argv, the
	// binary's absolute path first); Env is its whole environment.
	Cmdline []string
	Env     []string
	// LogFile receives the member's stdout and stderr.
	LogFile string

	mu sync.Mutex
	// cmd is the running process (nil when stopped), done closed when it
	// exited; both guarded by mu.
	cmd  *exec.Cmd
	done chan struct{}
}

// Endpoints lists the members' client URLs.
func (f *ForeignCluster) Endpoints() []string {
	var out []string
	for _, m := range f.Members {
		out = append(out, m.ClientURL)
	}
	return out
}

// StartForeignCluster starts an n-member etcd cluster of version v (from
// the test store) on free ports of a loopback address of its own (Addr),
// with TLS on client and peer ports, and waits until every member serves a
// linearizable read.
// Cleanup kills every member and removes the directory.
func StartForeignCluster(tb testing.TB, version string, n int) *ForeignCluster {
	tb.Helper()
	return startForeign(tb, version, n, nil, false, "")
}

// StartForeignClusterPeerNames is StartForeignCluster with a peer
// certificate of its own for each member, named after it (CN infra1, ...),
// and no --peer-cert-allowed-cn: the shape kubeadm gives a cluster, whose
// peer certificates carry the node's name.
func StartForeignClusterPeerNames(tb testing.TB, version string, n int) *ForeignCluster {
	tb.Helper()
	return startForeign(tb, version, n, nil, true, "")
}

// StartSibling starts another n-member cluster of f's version that shares
// f's CA and certificates (another cluster token, so another cluster ID):
// one client certificate reaches both, as with two clusters of one
// operator.
func (f *ForeignCluster) StartSibling(n int) *ForeignCluster {
	f.TB.Helper()
	p := ForeignPKI{CA: f.CAFile, CAKey: f.CAKeyFile, ClientCert: f.CertFile, ClientKey: f.KeyFile,
		ServerCert: filepath.Join(f.Dir, "pki", "server.pem"), ServerKey: filepath.Join(f.Dir, "pki", "server-key.pem")}
	return startForeign(f.TB, f.Version, n, &p, false, f.Addr)
}

func startForeign(tb testing.TB, version string, n int, shared *ForeignPKI, ownPeer bool, addr string) *ForeignCluster {
	tb.Helper()
	if addr == "" {
		addr = LoopbackAddr(tb)
	}
	bin := filepath.Join(Store(tb), "etcd-v"+version, "etcd")
	if _, err := os.Stat(bin); err != nil {
		tb.Fatalf("etcd %s is not in the test store: %v", version, err)
	}
	dir, err := os.MkdirTemp("", "fgn-")
	if err != nil {
		tb.Fatal(err)
	}
	f := &ForeignCluster{TB: tb, Dir: dir, Version: version, Token: "foreign-" + strconv.Itoa(os.Getpid()) + "-" + filepath.Base(dir), Addr: addr}
	tb.Cleanup(func() {
		for _, m := range f.Members {
			m.Kill()
		}
		if !tb.Failed() || os.Getenv("STEWARD_KEEP_FAILED") == "" {
			_ = os.RemoveAll(dir)
		} else {
			tb.Logf("keeping %s", dir)
		}
	})
	var certs ForeignPKI
	if shared != nil {
		certs = *shared
	} else if certs, err = WriteForeignPKI(filepath.Join(dir, "pki"), "foreign-client", addr); err != nil {
		tb.Fatal(err)
	}
	f.CAFile, f.CertFile, f.KeyFile, f.CAKeyFile = certs.CA, certs.ClientCert, certs.ClientKey, certs.CAKey

	ports := freePorts(tb, addr, 2*n)
	var initial []string
	for i := 1; i <= n; i++ {
		cp, pp := ports[2*i-2], ports[2*i-1]
		name := fmt.Sprintf("infra%d", i)
		m := &ForeignMember{
			Name:      name,
			ClientURL: "https://" + net.JoinHostPort(addr, strconv.Itoa(cp)),
			PeerURL:   "https://" + net.JoinHostPort(addr, strconv.Itoa(pp)),
			DataDir:   filepath.Join(dir, name, "data"),
			LogFile:   filepath.Join(dir, name, "etcd.log"),
		}
		if err := os.MkdirAll(filepath.Join(dir, name), 0o700); err != nil {
			tb.Fatal(err)
		}
		f.Members = append(f.Members, m)
		initial = append(initial, name+"="+m.PeerURL)
	}
	for _, m := range f.Members {
		peerCert, peerKey := certs.ServerCert, certs.ServerKey
		if ownPeer {
			peerCert, peerKey = filepath.Join(dir, "pki", m.Name+"-peer.pem"), filepath.Join(dir, "pki", m.Name+"-peer-key.pem")
			if err := writeForeignPeer(certs, m.Name, peerCert, peerKey, addr); err != nil {
				tb.Fatal(err)
			}
		}
		m.Cmdline = []string{bin,
			"--name=" + m.Name,
			"--data-dir=" + m.DataDir,
			"--listen-client-urls=" + m.ClientURL,
			"--advertise-client-urls=" + m.ClientURL,
			"--listen-peer-urls=" + m.PeerURL,
			"--initial-advertise-peer-urls=" + m.PeerURL,
			"--initial-cluster=" + strings.Join(initial, ","),
			"--initial-cluster-token=" + f.Token,
			"--initial-cluster-state=new",
			"--cert-file=" + certs.ServerCert, "--key-file=" + certs.ServerKey,
			"--trusted-ca-file=" + certs.CA, "--client-cert-auth",
			"--peer-cert-file=" + peerCert, "--peer-key-file=" + peerKey,
			"--peer-trusted-ca-file=" + certs.CA, "--peer-client-cert-auth",
			"--snapshot-count=5000",
		}
		m.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + filepath.Join(dir, m.Name)}
		if err := m.Start(); err != nil {
			tb.Fatal(err)
		}
	}
	f.WaitReady()
	return f
}

// WaitReady waits (one minute at most) until every running member serves a
// linearizable read.
func (f *ForeignCluster) WaitReady() {
	f.TB.Helper()
	for _, m := range f.Members {
		Eventually(f.TB, time.Minute, 200*time.Millisecond, "foreign member "+m.Name+" serves a linearizable read", func() error {
			if !m.Running() {
				return fmt.Errorf("not running (log %s)", m.LogFile)
			}
			cli, err := f.Client(m.ClientURL)
			if err != nil {
				return err
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err = cli.Get(ctx, "health")
			return err
		})
	}
}

// Client returns an etcd client of the given endpoints (every member when
// none) with the cluster's client certificate; the caller closes it.
func (f *ForeignCluster) Client(endpoints ...string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		endpoints = f.Endpoints()
	}
	tc, err := pki.ClientTLSFiles(f.CAFile, f.CertFile, f.KeyFile)
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tc, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
}

// MustClient is Client for the test's goroutine, closed when the test ends.
func (f *ForeignCluster) MustClient(endpoints ...string) *clientv3.Client {
	f.TB.Helper()
	cli, err := f.Client(endpoints...)
	if err != nil {
		f.TB.Fatal(err)
	}
	f.TB.Cleanup(func() { cli.Close() })
	return cli
}

// Start starts the member's process with its Cmdline and Env (output
// appended to LogFile). It refuses while the process runs.
func (m *ForeignMember) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return fmt.Errorf("foreign member %s is already running (pid %d)", m.Name, m.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(m.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(m.Cmdline[0], m.Cmdline[1:]...)
	cmd.Env = m.Env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start foreign member %s: %w", m.Name, err)
	}
	done := make(chan struct{})
	m.cmd, m.done = cmd, done
	go func() {
		_ = cmd.Wait()
		logf.Close()
		m.mu.Lock()
		if m.cmd == cmd {
			m.cmd = nil
		}
		m.mu.Unlock()
		close(done)
	}()
	return nil
}

// PID is the running process' pid, 0 when stopped.
func (m *ForeignMember) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// Running reports whether the member's process runs.
func (m *ForeignMember) Running() bool { return m.PID() != 0 }

// Stop sends SIGTERM and waits (15 s, then SIGKILL) until the process exited.
func (m *ForeignMember) Stop() { m.signal(syscall.SIGTERM, 15*time.Second) }

// Kill sends SIGKILL and waits until the process exited.
func (m *ForeignMember) Kill() { m.signal(syscall.SIGKILL, 0) }

func (m *ForeignMember) signal(sig syscall.Signal, grace time.Duration) {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	if grace > 0 {
		select {
		case <-done:
			return
		case <-time.After(grace):
			_ = cmd.Process.Kill()
		}
	}
	<-done
}

// ForeignPKI names the files WriteForeignPKI wrote.
type ForeignPKI struct {
	CA, CAKey             string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// WriteForeignPKI writes into dir a CA of its own (ECDSA P-256, Go's
// crypto only), a server certificate for 127.0.0.1, localhost and addrs (server
// and client usage: members use it on client and peer ports) and a client
// certificate of common name cn, keys 0600. Tests use a second call to
// make a certificate the cluster does not trust.
func WriteForeignPKI(dir, cn string, addrs ...string) (ForeignPKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ForeignPKI{}, err
	}
	p := ForeignPKI{
		CA: filepath.Join(dir, "ca.pem"), CAKey: filepath.Join(dir, "ca-key.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, cn+".pem"), ClientKey: filepath.Join(dir, cn+"-key.pem"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "foreign-etcd-ca", Organization: []string{"not steward"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(2 * 365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return p, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return p, err
	}
	if err := writePEM(p.CA, "CERTIFICATE", caDER, 0o644); err != nil {
		return p, err
	}
	if err := writeKey(p.CAKey, caKey); err != nil {
		return p, err
	}
	leaf := func(serial int64, cn string, usage []x509.ExtKeyUsage, ips []net.IP, dns []string, certFile, keyFile string) error {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		t := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(365 * 24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: usage,
			IPAddresses: ips, DNSNames: dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, t, caCert, &k.PublicKey, caKey)
		if err != nil {
			return err
		}
		if err := writePEM(certFile, "CERTIFICATE", der, 0o644); err != nil {
			return err
		}
		return writeKey(keyFile, k)
	}
	if err := leaf(2, "etcd-server", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		loopbackIPs(addrs...), []string{"localhost"}, p.ServerCert, p.ServerKey); err != nil {
		return p, err
	}
	if err := leaf(3, cn, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, nil, p.ClientCert, p.ClientKey); err != nil {
		return p, err
	}
	return p, nil
}

// loopbackIPs is 127.0.0.1, ::1 and addrs, for a certificate's IP
// addresses.
func loopbackIPs(addrs ...string) []net.IP {
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}
	for _, a := range addrs {
		ips = append(ips, net.ParseIP(a))
	}
	return ips
}

// writeForeignPeer writes a peer certificate of common name cn for
// 127.0.0.1 and addr (server and client usage), signed by p's CA, and its
// key.
func writeForeignPeer(p ForeignPKI, cn, certFile, keyFile, addr string) error {
	caPEM, err := os.ReadFile(p.CA)
	if err != nil {
		return err
	}
	keyPEM, err := os.ReadFile(p.CAKey)
	if err != nil {
		return err
	}
	cb, _ := pem.Decode(caPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return fmt.Errorf("foreign CA %s or its key %s: no PEM block", p.CA, p.CAKey)
	}
	caCert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return err
	}
	caKey, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return err
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return err
	}
	now := time.Now()
	t := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: loopbackIPs(addr), DNSNames: []string{"localhost", cn},
	}
	der, err := x509.CreateCertificate(rand.Reader, t, caCert, &k.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writePEM(certFile, "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writeKey(keyFile, k)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

func writeKey(path string, k *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return err
	}
	if err := writePEM(path, "EC PRIVATE KEY", der, 0o600); err != nil {
		return errors.Join(fmt.Errorf("write key %s", path), err)
	}
	return nil
}
