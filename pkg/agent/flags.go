package agent

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/catalogue"
	"github.com/etcd-steward/steward/pkg/spec"
)

// EtcdFlags returns the etcd command-line flags for a member config. Extra
// flags are spelled for the member's version as the catalogue says (a flag
// etcd renamed gets the name that version knows). It reads nothing but the
// peer certificate, so the mapping from spec to flags can be tested without
// a process.
//
// With TLS on, the peer port accepts only certificates with the peer
// certificate's common name (--peer-cert-allowed-cn): one CA signs the
// server, peer and client certificates, and without it the client
// certificate (Steward's, etcdctl's) would be accepted for raft traffic.
// The name is read from the peer certificate file, so it follows whatever
// certificate the member runs with. An adopted member keeps what it ran
// with instead (TLSFiles.PeerAllowedCN, PeerAnyCN).
func EtcdFlags(c agentapi.MemberConfig, cat *catalogue.Catalogue) ([]string, error) {
	return EtcdFlagsListening(c, cat, "")
}

// EtcdFlagsListening is EtcdFlags for a member that listens on another
// address than the one it advertises: listenHost (an IP address, or
// 0.0.0.0) replaces the host of its client and peer URLs in
// --listen-client-urls and --listen-peer-urls, while
// --advertise-client-urls and --initial-advertise-peer-urls keep the
// config's URLs. A member pod advertises its DNS name, which etcd cannot
// bind, and listens on the pod's IP (Options.ListenHost, the agent's pod
// mode). Empty listenHost: EtcdFlags.
func EtcdFlagsListening(c agentapi.MemberConfig, cat *catalogue.Catalogue, listenHost string) ([]string, error) {
	extra, err := cat.Flags(c.Version, c.ExtraFlags)
	if err != nil {
		return nil, fmt.Errorf("member %s: %w", c.Name, err)
	}
	// Checked again as spelt for this version: a rename in the catalogue
	// (or an override file) must not turn an allowed key into a reserved
	// flag.
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		if err := spec.CheckExtraFlag(k); err != nil {
			return nil, fmt.Errorf("member %s: extraFlags %w", c.Name, err)
		}
	}
	f := []string{
		"--name=" + c.Name,
		"--data-dir=" + c.DataDir,
		"--listen-client-urls=" + ListenURL(c.ClientURL, listenHost),
		"--advertise-client-urls=" + c.ClientURL,
		"--listen-peer-urls=" + ListenURL(c.PeerURL, listenHost),
		"--initial-advertise-peer-urls=" + c.PeerURL,
		"--initial-cluster=" + c.InitialCluster,
		"--initial-cluster-state=" + c.InitialClusterState,
		"--initial-cluster-token=" + c.InitialClusterToken,
		"--logger=zap",
		"--log-outputs=stderr",
	}
	if c.QuotaBackendBytes > 0 {
		f = append(f, fmt.Sprintf("--quota-backend-bytes=%d", c.QuotaBackendBytes))
	}
	if c.AutoCompactionMode != "" && c.AutoCompactionRetention != "" {
		f = append(f, "--auto-compaction-mode="+c.AutoCompactionMode,
			"--auto-compaction-retention="+c.AutoCompactionRetention)
	}
	if c.SnapshotCount > 0 {
		f = append(f, fmt.Sprintf("--snapshot-count=%d", c.SnapshotCount))
	}
	if c.ForceNewCluster {
		f = append(f, "--force-new-cluster")
	}
	if c.HeartbeatIntervalMs > 0 {
		f = append(f, fmt.Sprintf("--heartbeat-interval=%d", c.HeartbeatIntervalMs))
	}
	if c.ElectionTimeoutMs > 0 {
		f = append(f, fmt.Sprintf("--election-timeout=%d", c.ElectionTimeoutMs))
	}
	if t := c.TLS; t != nil {
		f = append(f,
			"--cert-file="+t.ServerCert, "--key-file="+t.ServerKey,
			"--trusted-ca-file="+t.CA, "--client-cert-auth=true",
			"--peer-cert-file="+t.PeerCert, "--peer-key-file="+t.PeerKey,
			"--peer-trusted-ca-file="+t.CA, "--peer-client-cert-auth=true",
		)
		switch {
		case t.PeerAnyCN:
		case t.PeerAllowedCN != "":
			f = append(f, "--peer-cert-allowed-cn="+t.PeerAllowedCN)
		default:
			peerCN, err := commonName(t.PeerCert)
			if err != nil {
				return nil, fmt.Errorf("member %s: %w", c.Name, err)
			}
			f = append(f, "--peer-cert-allowed-cn="+peerCN)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		f = append(f, "--"+strings.TrimLeft(k, "-")+"="+extra[k])
	}
	return f, nil
}

// ListenURL returns raw (a member's client or peer URL) with its host
// replaced by listenHost, keeping the scheme and the port; raw as it is
// when listenHost is empty or raw does not parse (ValidateConfig refuses
// such a config before it is stored).
func ListenURL(raw, listenHost string) string {
	if listenHost == "" {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return raw
	}
	u.Host = net.JoinHostPort(listenHost, u.Port())
	return u.String()
}

// ValidateConfig checks a member config before the agent stores it.
func ValidateConfig(c agentapi.MemberConfig) error {
	var problems []string
	if err := spec.ValidName(c.Name); err != nil {
		problems = append(problems, err.Error())
	}
	if c.Version == "" {
		problems = append(problems, "version is empty")
	}
	if c.DataDir == "" {
		problems = append(problems, "dataDir is empty")
	}
	for _, u := range []struct{ n, v string }{{"clientURL", c.ClientURL}, {"peerURL", c.PeerURL}} {
		pu, err := url.Parse(u.v)
		if err != nil || pu.Host == "" {
			problems = append(problems, fmt.Sprintf("%s %q is not a URL", u.n, u.v))
		}
	}
	switch c.InitialClusterState {
	case "new", "existing":
	default:
		problems = append(problems, fmt.Sprintf("initialClusterState %q: want new or existing", c.InitialClusterState))
	}
	if c.InitialCluster == "" {
		problems = append(problems, "initialCluster is empty")
	}
	for _, k := range slices.Sorted(maps.Keys(c.ExtraFlags)) {
		if err := spec.CheckExtraFlag(k); err != nil {
			problems = append(problems, "extraFlags "+err.Error())
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("member config %s: %s", c.Name, strings.Join(problems, "; "))
	}
	return nil
}

// commonName reads a PEM certificate file and returns its subject's common
// name.
func commonName(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("peer certificate: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return "", fmt.Errorf("peer certificate %s: no PEM certificate found", path)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return "", fmt.Errorf("peer certificate %s: %w", path, err)
	}
	// etcd splits the flag's value at commas (a list of names).
	if cn := cert.Subject.CommonName; cn == "" || strings.Contains(cn, ",") {
		return "", fmt.Errorf("peer certificate %s: common name %q cannot restrict the peer port: it must be set and hold no comma", path, cn)
	}
	return cert.Subject.CommonName, nil
}
