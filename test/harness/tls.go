package harness

import (
	"crypto/tls"
	"crypto/x509"
	"errors"

	"github.com/etcd-steward/steward/pkg/pki"
)

// FollowingTLS is the TLS config of a client that follows a CA rotation
// plan (`steward certs rotate-ca`): it reads its certificate and the CA
// bundle from their files at each new connection. (It checks the server's chain against the bundle; the
// server's name is not checked: a test client, every member on 127.0.0.1.)
func FollowingTLS(caFile, certFile, keyFile string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			pair, err := tls.LoadX509KeyPair(certFile, keyFile)
			return &pair, err
		},
		InsecureSkipVerify: true, // verified below, against the bundle of now
		VerifyConnection: func(cs tls.ConnectionState) error {
			pool, err := pki.CAPool(caFile)
			if err != nil {
				return err
			}
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no server certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err = cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter})
			return err
		},
	}
}
