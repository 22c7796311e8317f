package core_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/test/harness"
)

// TestPeerPortTakesPeerCertsOnly: one CA signs the server, peer and client
// certificates, so --peer-client-cert-auth alone lets the client
// certificate (Steward's, etcdctl's) talk raft on the peer port. With
// --peer-cert-allowed-cn set to the peer certificate's CN, a member
// rejects any other certificate of the CA on its peer port, while its
// peers (three members, so raft runs over the peer port) keep working.
//
// How etcd rejects it: its peer listener's VerifyPeerCertificate callback
// fails ("client certificate authentication failed", logged as "rejected
// connection on peer endpoint") and Go's TLS server sends a bad_certificate
// alert. Under TLS 1.2 the client's handshake fails with it; under TLS 1.3
// the client's side of the handshake completes first (the server checks
// the client certificate after the client's Finished), and the alert
// arrives on the first read.
func TestPeerPortTakesPeerCertsOnly(t *testing.T) {
	t.Parallel()
	for _, v := range harness.Versions() {
		t.Run(v, func(t *testing.T) {
			e := harness.New(t)
			e.Up(3, v)
			s := e.Spec()
			certs := pki.FilesIn(s.CertDir(e.Dir))
			m := s.Members[0]
			peer, err := url.Parse(m.PeerURL)
			if err != nil {
				t.Fatal(err)
			}
			logPath := filepath.Join(e.Dir, "logs", m.Name+".log")
			const rejected, cnCheck = "rejected connection on peer endpoint", "client certificate authentication failed"
			// Raft among the three members uses the peer certificate on
			// both ends: the CN check refused none of those connections.
			if n := countLines(t, logPath, rejected, cnCheck); n != 0 {
				t.Fatalf("%s refused %d peer connections by their certificate before the test's own", m.Name, n)
			}
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", e.MemberPID(m.Name)))
			if err != nil {
				t.Fatal(err)
			}
			if want := "--peer-cert-allowed-cn=" + s.Name + "-peer"; !strings.Contains(string(cmdline), want) {
				t.Errorf("member command line lacks %s: %q", want, cmdline)
			}

			// The peer certificate is served /members on the peer port.
			resp, err := httpsClient(t, certs.PeerCert, certs.PeerKey, certs.CA, 0).Get(m.PeerURL + "/members")
			if err != nil {
				t.Fatalf("GET %s/members with the peer certificate: %v", m.PeerURL, err)
			}
			var members []struct {
				Name string `json:"name"`
			}
			err = json.NewDecoder(resp.Body).Decode(&members)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || err != nil || len(members) != 3 {
				t.Fatalf("GET /members with the peer certificate: %s, %d members (%v), want 200 and 3", resp.Status, len(members), err)
			}

			// The client certificate is good: the client port takes it.
			resp, err = httpsClient(t, certs.ClientCert, certs.ClientKey, certs.CA, 0).Get(m.ClientURL + "/version")
			if err != nil {
				t.Fatalf("GET %s/version with the client certificate: %v", m.ClientURL, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /version with the client certificate: %s", resp.Status)
			}

			// But not the peer port; nor is the server certificate.
			const alert = "remote error: tls: bad certificate"
			for _, c := range []struct{ what, cert, key string }{
				{"client certificate", certs.ClientCert, certs.ClientKey},
				{"server certificate", certs.ServerCert, certs.ServerKey},
			} {
				resp, err := httpsClient(t, c.cert, c.key, certs.CA, 0).Get(m.PeerURL + "/members")
				if err == nil {
					resp.Body.Close()
					t.Errorf("GET %s/members with the %s: %s, want the connection refused", m.PeerURL, c.what, resp.Status)
				} else if !strings.Contains(err.Error(), alert) {
					t.Errorf("GET %s/members with the %s: %v, want %q", m.PeerURL, c.what, err, alert)
				}

				// TLS 1.2: the handshake itself fails.
				conn, err := tls.Dial("tcp", peer.Host, tlsConfig(t, c.cert, c.key, certs.CA, tls.VersionTLS12))
				if err == nil {
					conn.Close()
					t.Errorf("TLS 1.2 handshake with the %s on the peer port succeeded", c.what)
				} else if !strings.Contains(err.Error(), alert) {
					t.Errorf("TLS 1.2 handshake with the %s: %v, want %q", c.what, err, alert)
				}

				// TLS 1.3: the client's handshake completes; the alert
				// comes on the first read, before any response.
				conn, err = tls.Dial("tcp", peer.Host, tlsConfig(t, c.cert, c.key, certs.CA, tls.VersionTLS13))
				if err != nil {
					t.Errorf("TLS 1.3 handshake with the %s: %v, want the client's side to complete", c.what, err)
					continue
				}
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				_, err = fmt.Fprintf(conn, "GET /members HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", peer.Host)
				var line string
				if err == nil {
					line, err = bufio.NewReader(conn).ReadString('\n')
				}
				conn.Close()
				if err == nil || !strings.Contains(err.Error(), alert) {
					t.Errorf("TLS 1.3 request with the %s: answer %q, error %v; want %q", c.what, line, err, alert)
				}
			}

			// Each refusal is the CN check, as the member logged it.
			harness.Eventually(t, 10*time.Second, 200*time.Millisecond, "the member to log the rejections", func() error {
				n := countLines(t, logPath, rejected, cnCheck)
				if n < 6 {
					return fmt.Errorf("%d rejections logged, want 6 (3 each for the client and server certificates)", n)
				}
				return nil
			})
		})
	}
}

func tlsConfig(t *testing.T, cert, key, ca string, version uint16) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no certificate in %s", ca)
	}
	c := &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	if version != 0 {
		c.MinVersion, c.MaxVersion = version, version
	}
	return c
}

// httpsClient presents cert and trusts ca; version 0 lets TLS negotiate.
func httpsClient(t *testing.T, cert, key, ca string, version uint16) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: tlsConfig(t, cert, key, ca, version), DisableKeepAlives: true}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// countLines counts the lines of a file that contain every one of subs.
func countLines(t *testing.T, path string, subs ...string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
next:
	for _, l := range strings.Split(string(b), "\n") {
		for _, s := range subs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		n++
	}
	return n
}
