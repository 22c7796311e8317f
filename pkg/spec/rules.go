package spec

import (
	"fmt"
	"regexp"
	"strings"
)

// ValidName checks a cluster, agent or member name: 1 to 63 characters of
// a-z, 0-9 and '-', starting and ending with a letter or digit. A valid name
// is safe as a file name component (no '/', no "..", no leading '.'), which
// is why the agent checks every member name it receives before using it in
// a path.
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("name %q: use 1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit", name)
	}
	return nil
}

// flagNameRE is the shape of every etcd flag name: lower-case words
// joined by '-'. Anything else ("data-dir=x", "Data-Dir", "a b") is not a
// flag name, and could smuggle a reserved flag into the command line.
var flagNameRE = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// Why an etcd flag may not be set through extraFlags.
const (
	fromSpec = "is set by Steward from the spec; set it through the spec's fields instead"
	ownedTLS = "would change the members' TLS or certificate checks, which Steward sets: it cannot be overridden"
	ownedRun = "would change where a member keeps its data, listens, or finds its cluster, which Steward decides: it cannot be overridden"
	noFsync  = "turns off etcd's fsync, so a crash can lose acknowledged writes: Steward's recovery assumes it cannot"
)

// reserved flags are owned by Steward: derived from the spec or the member,
// or deciding the members' security and where their data goes. The names are the
// ones etcd uses in any version Steward runs (CheckExtraFlag also strips
// the experimental- prefix, so both spellings of a renamed flag are caught).
var reserved = map[string]string{
	"name": fromSpec, "data-dir": fromSpec, "listen-client-urls": fromSpec, "advertise-client-urls": fromSpec,
	"listen-peer-urls": fromSpec, "initial-advertise-peer-urls": fromSpec, "initial-cluster": fromSpec,
	"initial-cluster-state": fromSpec, "initial-cluster-token": fromSpec,
	// Set from the spec's etcd section: change them there.
	"quota-backend-bytes": fromSpec, "auto-compaction-mode": fromSpec, "auto-compaction-retention": fromSpec,
	"snapshot-count": fromSpec, "heartbeat-interval": fromSpec, "election-timeout": fromSpec,
	"logger": fromSpec, "log-outputs": fromSpec,

	// TLS: the certificates, who may connect, and how.
	"cert-file": ownedTLS, "key-file": ownedTLS, "trusted-ca-file": ownedTLS, "client-cert-auth": ownedTLS,
	"peer-cert-file": ownedTLS, "peer-key-file": ownedTLS, "peer-trusted-ca-file": ownedTLS,
	"peer-client-cert-auth": ownedTLS, "client-cert-file": ownedTLS, "client-key-file": ownedTLS,
	"peer-client-cert-file": ownedTLS, "peer-client-key-file": ownedTLS,
	"auto-tls": ownedTLS, "peer-auto-tls": ownedTLS, "self-signed-cert-validity": ownedTLS,
	"client-crl-file": ownedTLS, "peer-crl-file": ownedTLS,
	"client-cert-allowed-hostname": ownedTLS, "peer-cert-allowed-cn": ownedTLS, "peer-cert-allowed-hostname": ownedTLS,
	"peer-skip-client-san-verification": ownedTLS, "cipher-suites": ownedTLS,
	"tls-min-version": ownedTLS, "tls-max-version": ownedTLS,

	// Where the data goes, what a member listens on, which cluster it joins.
	"wal-dir": ownedRun, "config-file": ownedRun, "force-new-cluster": ownedRun,
	// discovery stands for every discovery-* flag too (CheckExtraFlag).
	"listen-client-http-urls": ownedRun, "proxy": ownedRun, "discovery": ownedRun,
	"unsafe-no-fsync": noFsync,
}

// CheckExtraFlag returns an error when an extraFlags key is not a flag
// name or names a flag Steward owns. The key may carry leading dashes.
func CheckExtraFlag(key string) error {
	name := strings.TrimLeft(key, "-")
	if !flagNameRE.MatchString(name) {
		return fmt.Errorf("%q is not an etcd flag name: use lower-case letters, digits and '-'", key)
	}
	base := strings.TrimPrefix(name, "experimental-")
	why, ok := reserved[base]
	if !ok && strings.HasPrefix(base, "discovery-") {
		why, ok = reserved["discovery"], true
	}
	if ok {
		return fmt.Errorf("%q %s", key, why)
	}
	return nil
}
