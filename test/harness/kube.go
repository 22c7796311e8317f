package harness

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// KubeAPIServer is a real kube-apiserver (built by
// hack/build-kube-apiserver.sh) on loopback, storing its data in the Steward
// cluster of an Env over TLS with Steward's client certificate. Clients
// authenticate with an admin bearer token (group system:masters);
// authorization is RBAC.
//
// It keeps its port, serving certificate, service-account key and token
// across Stop and Start, so a kubeconfig, a rest.Config and the clients and
// informers built from them stay valid across restarts.
type KubeAPIServer struct {
	// EtcdServers are the etcd client URLs passed as --etcd-servers. Empty:
	// every member of the cluster spec, read again at each Start (so a
	// restart after a membership change follows the new members).
	EtcdServers []string
	// ExtraArgs are appended to the command line at each Start.
	ExtraArgs []string

	Bin        string // the kube-apiserver binary
	Dir        string // temporary directory: keys, token file, certs, log, kubeconfig
	Port       int    // secure port on the test's address (Env.Addr)
	URL        string // https://ADDR:PORT
	Token      string // admin bearer token (system:masters)
	Kubeconfig string // kubeconfig for the admin token, written once ready
	LogFile    string // the server's stdout and stderr, appended across restarts

	// Owned by the test's goroutine, which alone calls Start, Stop, Kill
	// and AddUser; client builders (RESTConfig...) read caData after Start
	// returned. The goroutine Start runs for each process only waits for
	// cmd (Wait writes cmd.ProcessState, read after exited is closed) and
	// then closes exited.
	e      *Env
	users  []kubeUser // added with AddUser
	caData []byte     // the serving certificate's CA (self-signed by kube-apiserver)
	cmd    *exec.Cmd  // the running server; nil when stopped
	exited chan struct{}
}

// Kubernetes is the version hack/build-kube-apiserver.sh builds by default.
const Kubernetes = "v1.36.3"

// KubeAPIServerBinary returns the kube-apiserver built by
// hack/build-kube-apiserver.sh (STEWARD_TEST_KUBE_APISERVER overrides the
// path); its absence fails the test.
func KubeAPIServerBinary(tb testing.TB) string {
	tb.Helper()
	p := os.Getenv("STEWARD_TEST_KUBE_APISERVER")
	if p == "" {
		p = filepath.Join(RepoRoot(tb), ".cache", "bin", "kube-apiserver")
	}
	if _, err := os.Stat(p); err != nil {
		tb.Fatalf("kube-apiserver %s is missing: run `make kube-apiserver` (hack/build-kube-apiserver.sh)", p)
	}
	return p
}

// StartKubeAPIServer starts a kube-apiserver against every member of e's
// cluster (which must be up) and waits until /readyz answers ok. It is
// stopped, with its whole process group, when the test ends; a failed test
// shows the end of its log.
func (e *Env) StartKubeAPIServer() *KubeAPIServer {
	e.TB.Helper()
	k := e.NewKubeAPIServer()
	k.Start()
	return k
}

// NewKubeAPIServer prepares a kube-apiserver (directory, port, keys, token)
// without starting it, so a test can set EtcdServers or ExtraArgs first.
func (e *Env) NewKubeAPIServer() *KubeAPIServer {
	tb := e.TB
	tb.Helper()
	k := &KubeAPIServer{e: e, Bin: KubeAPIServerBinary(tb)}
	dir, err := os.MkdirTemp("", "kas-")
	if err != nil {
		tb.Fatal(err)
	}
	k.Dir = dir
	k.LogFile = filepath.Join(dir, "kube-apiserver.log")
	k.Kubeconfig = filepath.Join(dir, "kubeconfig")
	tb.Cleanup(k.cleanup)

	port, err := spec.FreePort(e.Addr)()
	if err != nil {
		tb.Fatal(err)
	}
	k.Port = port
	k.URL = "https://" + net.JoinHostPort(e.Addr, strconv.Itoa(port))

	// Service-account signing key (ECDSA P-256: ES256 tokens).
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		tb.Fatal(err)
	}
	k.writeFile("sa.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
	k.writeFile("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))

	// Static token file: token,user,uid,"group,...".
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		tb.Fatal(err)
	}
	k.Token = hex.EncodeToString(tok)
	k.writeFile("tokens.csv", []byte(k.Token+`,steward-admin,steward-admin,"system:masters"`+"\n"))
	return k
}

type kubeUser struct{ name, token, kubeconfig string }

// AddUser adds a user with a bearer token of its own to the static token
// file, in the given groups (besides system:authenticated, to which RBAC
// grants next to nothing), and returns the path of a kubeconfig for it
// (written now if the server has started once, else at Start). The server
// reads the token file when it starts: add users before Start, or restart.
func (k *KubeAPIServer) AddUser(name string, groups ...string) (kubeconfig string) {
	tb := k.e.TB
	tb.Helper()
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		tb.Fatal(err)
	}
	u := kubeUser{name: name, token: hex.EncodeToString(tok), kubeconfig: filepath.Join(k.Dir, "kubeconfig-"+name)}
	line := u.token + "," + name + "," + name
	if len(groups) > 0 {
		line += `,"` + strings.Join(groups, ",") + `"`
	}
	f, err := os.OpenFile(filepath.Join(k.Dir, "tokens.csv"), os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	_, err = fmt.Fprintln(f, line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		tb.Fatal(err)
	}
	k.users = append(k.users, u)
	if k.caData != nil {
		k.writeKubeconfigFor(u.kubeconfig, name, u.token)
	}
	return u.kubeconfig
}

func (k *KubeAPIServer) writeFile(name string, b []byte) {
	k.e.TB.Helper()
	if err := os.WriteFile(filepath.Join(k.Dir, name), b, 0o600); err != nil {
		k.e.TB.Fatal(err)
	}
}

// Pid returns the running server's process id; 0 when it is stopped.
func (k *KubeAPIServer) Pid() int {
	if !k.Running() {
		return 0
	}
	return k.cmd.Process.Pid
}

// Running reports whether the process is alive.
func (k *KubeAPIServer) Running() bool {
	if k.cmd == nil {
		return false
	}
	select {
	case <-k.exited:
		return false
	default:
		return true
	}
}

// Args returns the command line Start uses (without the binary), copying
// the cluster's current CA and client certificate into Dir/etcd first.
func (k *KubeAPIServer) Args() []string {
	k.e.TB.Helper()
	s := k.e.Spec()
	servers := k.EtcdServers
	if len(servers) == 0 {
		servers = s.ClientURLs()
	}
	args := []string{
		"--etcd-servers=" + strings.Join(servers, ","),
		"--bind-address=" + k.e.Addr,
		"--secure-port=" + strconv.Itoa(k.Port),
		"--cert-dir=" + filepath.Join(k.Dir, "serving"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(k.Dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(k.Dir, "sa.key"),
		"--token-auth-file=" + filepath.Join(k.Dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.96.0.0/24",
		"--profiling=false",
	}
	if !s.TLS.Disabled {
		// Copies of the CA and client certificate: the command line then
		// never mentions the Steward directory, so tests that look for
		// processes left on it (harness.ProcessesUsing) do not find the API
		// server.
		var f pki.Files
		f.CA, f.ClientCert, f.ClientKey = s.ClientFiles(k.e.Dir) // an attached cluster's are the operator's
		etcd := filepath.Join(k.Dir, "etcd")
		if err := os.MkdirAll(etcd, 0o700); err != nil {
			k.e.TB.Fatal(err)
		}
		for _, c := range []struct{ from, to string }{{f.CA, "ca.crt"}, {f.ClientCert, "client.crt"}, {f.ClientKey, "client.key"}} {
			b, err := os.ReadFile(c.from)
			if err != nil {
				k.e.TB.Fatal(err)
			}
			k.writeFile(filepath.Join("etcd", c.to), b)
		}
		args = append(args,
			"--etcd-cafile="+filepath.Join(etcd, "ca.crt"),
			"--etcd-certfile="+filepath.Join(etcd, "client.crt"),
			"--etcd-keyfile="+filepath.Join(etcd, "client.key"))
	}
	return append(args, k.ExtraArgs...)
}

// Start runs the server and waits until /readyz answers ok (up to two
// minutes), then writes the kubeconfig. A server that exits at start fails
// the test with its log.
func (k *KubeAPIServer) Start() {
	tb := k.e.TB
	tb.Helper()
	if k.Running() {
		tb.Fatalf("kube-apiserver already running (pid %d)", k.cmd.Process.Pid)
	}
	args := k.Args()
	log, err := os.OpenFile(k.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	fmt.Fprintf(log, "=== %s start: %s %s\n", time.Now().Format(time.RFC3339Nano), k.Bin, strings.Join(args, " "))
	cmd := exec.Command(k.Bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	log.Close() // the child has its own descriptor
	if err != nil {
		tb.Fatalf("start kube-apiserver: %v", err)
	}
	k.cmd = cmd
	exited := make(chan struct{})
	k.exited = exited
	go func() { _ = cmd.Wait(); close(exited) }()

	probe := &http.Client{
		Timeout: 5 * time.Second,
		// The serving certificate does not exist before the server has
		// started; the probe only needs to know that it answers.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // readiness probe only
	}
	defer probe.CloseIdleConnections()
	start := time.Now()
	if err := Poll(2*time.Minute, 200*time.Millisecond, func() error {
		select {
		case <-exited:
			tb.Fatalf("kube-apiserver exited at start (%s)\n%s", cmd.ProcessState, k.logTail(60))
		default:
		}
		req, _ := http.NewRequest(http.MethodGet, k.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+k.Token)
		resp, err := probe.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != "ok" {
			return fmt.Errorf("/readyz answered %d %s", resp.StatusCode, b)
		}
		return nil
	}); err != nil {
		// Poll's error holds the last answer; the log says why.
		tb.Fatalf("kube-apiserver /readyz: %v\n%s", err, k.logTail(60))
	}
	tb.Logf("kube-apiserver ready at %s in %s (pid %d, log %s)", k.URL, time.Since(start).Round(time.Millisecond), cmd.Process.Pid, k.LogFile)
	k.loadCA()
	k.writeKubeconfig()
}

// loadCA reads the CA of the self-signed serving certificate kube-apiserver
// generated in its cert dir (apiserver.crt holds the certificate, then its
// CA).
func (k *KubeAPIServer) loadCA() {
	tb := k.e.TB
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(k.Dir, "serving", "apiserver.crt"))
	if err != nil {
		tb.Fatal(err)
	}
	var ca []byte
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			tb.Fatalf("serving certificate: %v", err)
		}
		if c.IsCA {
			ca = append(ca, pem.EncodeToMemory(blk)...)
		}
	}
	if ca == nil {
		tb.Fatalf("no CA certificate in %s", filepath.Join(k.Dir, "serving", "apiserver.crt"))
	}
	k.caData = ca
}

func (k *KubeAPIServer) writeKubeconfig() {
	k.e.TB.Helper()
	k.writeKubeconfigFor(k.Kubeconfig, "steward-admin", k.Token)
	for _, u := range k.users {
		k.writeKubeconfigFor(u.kubeconfig, u.name, u.token)
	}
}

func (k *KubeAPIServer) writeKubeconfigFor(path, user, token string) {
	k.e.TB.Helper()
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: steward
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %[3]s
  user:
    token: %[4]s
contexts:
- name: steward
  context:
    cluster: steward
    user: %[3]s
current-context: steward
`, k.URL, base64.StdEncoding.EncodeToString(k.caData), user, token)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		k.e.TB.Fatal(err)
	}
}

// RESTConfig returns a client-go config for the admin token, trusting the
// server's CA, without client-side rate limiting worth mentioning.
func (k *KubeAPIServer) RESTConfig() *rest.Config {
	k.e.TB.Helper()
	if k.caData == nil {
		k.e.TB.Fatal("kube-apiserver has not been started")
	}
	return &rest.Config{
		Host:            k.URL,
		BearerToken:     k.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: k.caData},
		QPS:             200,
		Burst:           400,
	}
}

// Clientset returns a typed client-go client for the admin token.
func (k *KubeAPIServer) Clientset() kubernetes.Interface {
	k.e.TB.Helper()
	c, err := kubernetes.NewForConfig(k.RESTConfig())
	if err != nil {
		k.e.TB.Fatal(err)
	}
	return c
}

// Dynamic returns a dynamic client (custom resources, unstructured
// objects) for the admin token.
func (k *KubeAPIServer) Dynamic() dynamic.Interface {
	k.e.TB.Helper()
	c, err := dynamic.NewForConfig(k.RESTConfig())
	if err != nil {
		k.e.TB.Fatal(err)
	}
	return c
}

// Stop stops the server: SIGTERM to its process group, SIGKILL after 30 s.
// Stopping a stopped server does nothing.
func (k *KubeAPIServer) Stop() {
	k.e.TB.Helper()
	if err := k.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		k.e.TB.Error(err)
	}
}

// Kill stops the server with SIGKILL (a crash).
func (k *KubeAPIServer) Kill() {
	k.e.TB.Helper()
	if err := k.stop(syscall.SIGKILL, 10*time.Second); err != nil {
		k.e.TB.Error(err)
	}
}

func (k *KubeAPIServer) stop(sig syscall.Signal, grace time.Duration) error {
	if k.cmd == nil {
		return nil
	}
	pgid := k.cmd.Process.Pid
	defer func() { k.cmd = nil }()
	_ = syscall.Kill(-pgid, sig)
	select {
	case <-k.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		select {
		case <-k.exited:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("kube-apiserver (pid %d) did not exit after SIGKILL", pgid)
		}
	}
	// Anything else left in the group (kube-apiserver starts no children
	// today; a future plugin might).
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

func (k *KubeAPIServer) cleanup() {
	tb := k.e.TB
	if err := k.stop(syscall.SIGTERM, 15*time.Second); err != nil {
		tb.Error(err)
	}
	if tb.Failed() {
		tb.Logf("kube-apiserver log %s, last lines:\n%s", k.LogFile, k.logTail(80))
	}
	if !tb.Failed() || os.Getenv("STEWARD_KEEP_FAILED") == "" {
		_ = os.RemoveAll(k.Dir)
	} else {
		tb.Logf("keeping %s", k.Dir)
	}
}

// logTail returns the last n lines of the server's log.
func (k *KubeAPIServer) logTail(n int) string {
	b, err := os.ReadFile(k.LogFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "(no log)"
		}
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
