// Package join carries a host into a multi-host cluster: the join file the
// coordinator writes for each host (`steward init`, `steward host add`) and
// the identity a host's agent keeps after applying it (DIR/agent.yaml with
// its certificates in DIR/pki).
//
// A join file is a secret: it holds the host's private keys. It is written
// 0600, expires (so a file found later on a disk or in a mailbox cannot
// bring a host in), and names the cluster it belongs to by the cluster's
// token, so an agent that joined one cluster refuses a file for another.
//
// Invariant: an agent's identity file is written last, after every
// certificate it names, so a host either has joined completely or not at
// all (a crash halfway leaves certificates but no identity, and the same
// join file applies again).
package join

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/pki"
)

// Kinds of the two files.
const (
	kindFile     = "JoinFile"
	kindIdentity = "AgentIdentity"
	apiVersion   = "steward.etcd.io/v1alpha1"
)

// DefaultValidity is how long a join file can be applied after it is written.
const DefaultValidity = 24 * time.Hour

// IdentityFile is the name of the identity inside an agent's directory.
const IdentityFile = "agent.yaml"

// File is a join file: everything one host's agent needs.
type File struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Cluster is the cluster's name; ClusterToken its token (spec.Token),
	// which tells two clusters of one name apart.
	Cluster      string `json:"cluster"`
	ClusterToken string `json:"clusterToken"`
	// Agent is the host's agent name in the spec; Host its address, where
	// the agent serves its API on Port and its members bind.
	Agent     string    `json:"agent"`
	Host      string    `json:"host"`
	Port      int       `json:"port"`
	ExpiresAt time.Time `json:"expiresAt"`
	// PEM-encoded certificates and keys (pki.HostBundle).
	CA         string `json:"ca"`
	AgentCert  string `json:"agentCert"`
	AgentKey   string `json:"agentKey"`
	ServerCert string `json:"serverCert"`
	ServerKey  string `json:"serverKey"`
	PeerCert   string `json:"peerCert"`
	PeerKey    string `json:"peerKey"`
	ClientCert string `json:"clientCert"`
	ClientKey  string `json:"clientKey"`
	// BackupAuthKey is the cluster backup key (hex), which authenticates
	// the backup manifests the host's loop writes and reads.
	BackupAuthKey string `json:"backupAuthKey,omitempty"`
}

// Identity is what an agent keeps of its join file (no keys: those are in
// its certificate directory).
type Identity struct {
	APIVersion   string    `json:"apiVersion"`
	Kind         string    `json:"kind"`
	Cluster      string    `json:"cluster"`
	ClusterToken string    `json:"clusterToken"`
	Agent        string    `json:"agent"`
	Host         string    `json:"host"`
	Port         int       `json:"port"`
	JoinedAt     time.Time `json:"joinedAt"`
}

// Listen is the address the agent's API listens on.
func (id *Identity) Listen() string { return net.JoinHostPort(id.Host, fmt.Sprint(id.Port)) }

// New builds the join file of a host from the certificates issued for it.
func New(cluster, token, agent, host string, port int, b *pki.HostBundle, expires time.Time) *File {
	return &File{
		APIVersion: apiVersion, Kind: kindFile,
		Cluster: cluster, ClusterToken: token, Agent: agent, Host: host, Port: port, ExpiresAt: expires.UTC(),
		CA: string(b.CA), AgentCert: string(b.AgentCert), AgentKey: string(b.AgentKey),
		ServerCert: string(b.ServerCert), ServerKey: string(b.ServerKey),
		PeerCert: string(b.PeerCert), PeerKey: string(b.PeerKey),
		ClientCert: string(b.ClientCert), ClientKey: string(b.ClientKey),
		BackupAuthKey: string(b.BackupAuthKey),
	}
}

func (f *File) bundle() *pki.HostBundle {
	b := &pki.HostBundle{
		CA: []byte(f.CA), AgentCert: []byte(f.AgentCert), AgentKey: []byte(f.AgentKey),
		ServerCert: []byte(f.ServerCert), ServerKey: []byte(f.ServerKey),
		PeerCert: []byte(f.PeerCert), PeerKey: []byte(f.PeerKey),
		ClientCert: []byte(f.ClientCert), ClientKey: []byte(f.ClientKey),
	}
	if f.BackupAuthKey != "" {
		b.BackupAuthKey = []byte(f.BackupAuthKey)
	}
	return b
}

// Write writes a join file atomically, 0600.
func (f *File) Write(path string) error {
	b, err := yaml.Marshal(f)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write join file: %w", err)
	}
	hdr := "# Steward join file for host " + f.Agent + ". It holds this host's private keys:\n" +
		"# copy it to the host, run `steward agent --join FILE`, then delete it.\n"
	return atomicfile.WriteFile(path, append([]byte(hdr), b...), 0o600)
}

// Read parses a join file (unknown fields refused).
func Read(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read join file: %w", err)
	}
	return Parse(b)
}

// Parse parses a join file's contents (unknown fields refused).
func Parse(b []byte) (*File, error) {
	var f File
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, fmt.Errorf("join file does not parse: %w", err)
	}
	if f.Kind != kindFile {
		return nil, fmt.Errorf("not a join file (kind %q, want %s)", f.Kind, kindFile)
	}
	return &f, nil
}

// Errors of Check and Apply a caller may want to tell apart (a command
// says how to get a good file).
var (
	ErrIncomplete   = errors.New("join file is incomplete")
	ErrExpired      = errors.New("join file expired")
	ErrOtherCluster = errors.New("join file is for another cluster")
	ErrNotThisHost  = errors.New("join file's host address is not on this machine")
)

// Check verifies a join file before anything is written: not expired, its
// certificates whole and issued for its agent and address, and that
// address one of localAddrs (this machine's; nil skips that check).
func (f *File) Check(now time.Time, localAddrs []net.IP) error {
	if f.Agent == "" || f.Host == "" || f.Port < 1 || f.Port > 65535 || f.ClusterToken == "" {
		return fmt.Errorf("%w (agent %q, host %q, port %d)", ErrIncomplete, f.Agent, f.Host, f.Port)
	}
	if !now.Before(f.ExpiresAt) {
		return fmt.Errorf("%w at %s (it is valid for %s after it is written)", ErrExpired, f.ExpiresAt.Format(time.RFC3339), DefaultValidity)
	}
	if localAddrs != nil {
		ips, err := resolve(f.Host)
		if err != nil {
			return err
		}
		if !anyLocal(ips, localAddrs) && !bindable(ips) {
			return fmt.Errorf("%w: it is for host %s at %s, and no interface here has that address; copy it to that host, or fix the address on the coordinator", ErrNotThisHost, f.Agent, f.Host)
		}
	}
	if err := pki.CheckHost(f.bundle(), f.Agent, f.Host, now); err != nil {
		return fmt.Errorf("join file for host %s: %w", f.Agent, err)
	}
	return nil
}

// Apply makes dir the directory of f's agent: it checks f, refuses a
// directory that joined another cluster or is another host's agent,
// writes the certificates into dir/pki and then the identity. Applying
// the same host's file again (for instance, new certificates) is allowed.
func Apply(dir string, f *File, now time.Time, localAddrs []net.IP) (*Identity, error) {
	if err := f.Check(now, localAddrs); err != nil {
		return nil, err
	}
	old, err := LoadIdentity(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	case old.ClusterToken != f.ClusterToken:
		return nil, fmt.Errorf("%w: %s already belongs to cluster %s (token %s), the file is for cluster %s (token %s)",
			ErrOtherCluster, dir, old.Cluster, old.ClusterToken, f.Cluster, f.ClusterToken)
	case old.Agent != f.Agent:
		return nil, fmt.Errorf("%s is the directory of agent %s; the join file is for agent %s: use that host's own file", dir, old.Agent, f.Agent)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("agent directory: %w", err)
	}
	if err := pki.WriteHost(filepath.Join(dir, "pki"), f.bundle()); err != nil {
		return nil, err
	}
	id := &Identity{
		APIVersion: apiVersion, Kind: kindIdentity, Cluster: f.Cluster, ClusterToken: f.ClusterToken,
		Agent: f.Agent, Host: f.Host, Port: f.Port, JoinedAt: now.UTC(),
	}
	b, err := yaml.Marshal(id)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, IdentityFile), b, 0o600); err != nil {
		return nil, fmt.Errorf("write agent identity: %w", err)
	}
	return id, nil
}

// LoadIdentity reads dir's agent identity; an error wrapping os.ErrNotExist
// means the directory has not joined a cluster.
func LoadIdentity(dir string) (*Identity, error) {
	p := filepath.Join(dir, IdentityFile)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var id Identity
	if err := yaml.UnmarshalStrict(b, &id); err != nil {
		return nil, fmt.Errorf("agent identity %s does not parse: %w", p, err)
	}
	if id.Kind != kindIdentity {
		return nil, fmt.Errorf("%s is not an agent identity (kind %q)", p, id.Kind)
	}
	return &id, nil
}

// LocalAddrs lists this machine's interface addresses.
func LocalAddrs() ([]net.IP, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list this machine's addresses: %w", err)
	}
	var out []net.IP
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, n.IP)
		}
	}
	return out, nil
}

func resolve(host string) ([]net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return []net.IP{ip}, nil
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return nil, fmt.Errorf("host address %q does not resolve: %w", host, err)
	}
	return ips, nil
}

// bindable reports whether a listener can bind one of ips here: the
// address belongs to this machine even when no interface lists it (a
// loopback address other than 127.0.0.1, say).
func bindable(ips []net.IP) bool {
	for _, ip := range ips {
		l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
		if err == nil {
			l.Close()
			return true
		}
	}
	return false
}

func anyLocal(ips, local []net.IP) bool {
	for _, ip := range ips {
		for _, l := range local {
			if ip.Equal(l) {
				return true
			}
		}
	}
	return false
}
