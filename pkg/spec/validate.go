package spec

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/etcd-steward/steward/pkg/refusal"
)

// ValidateOptions carry what validation needs from outside the spec.
type ValidateOptions struct {
	// KnownVersion returns nil when the etcd version can be run (it is in
	// the binary store or is the embedded version). Nil skips the check.
	KnownVersion func(version string) error
	// Resolve returns the IP addresses of a host name; nil resolves with
	// the system resolver. IP literals are never looked up.
	Resolve func(host string) ([]string, error)
}

// resolver returns the addresses a host stands for, normalized, so that
// "localhost" and "127.0.0.1" compare equal.
func (o ValidateOptions) resolver() func(string) ([]string, error) {
	look := o.Resolve
	if look == nil {
		look = func(h string) ([]string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			return net.DefaultResolver.LookupHost(ctx, h)
		}
	}
	cache := map[string][]string{}
	return func(h string) ([]string, error) {
		if ip := net.ParseIP(h); ip != nil {
			return []string{ip.String()}, nil
		}
		if a, ok := cache[h]; ok {
			return a, nil
		}
		raw, err := look(h)
		if err != nil {
			return nil, fmt.Errorf("host %q does not resolve: %w", h, err)
		}
		var out []string
		for _, r := range raw {
			if ip := net.ParseIP(r); ip != nil {
				out = append(out, ip.String())
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("host %q resolves to no IP address", h)
		}
		cache[h] = out
		return out, nil
	}
}

// Kinds of validation problems a command ends, the command layer naming
// it in the problem's line (cli.LibraryAdvice): the library says what.
var (
	// ErrOperatorFileEmpty: an attached cluster's certificate file is
	// left empty before the certificate take-over.
	ErrOperatorFileEmpty = errors.New("an attached cluster's certificate file is empty")
	// ErrAgentBeforeAdopt: a member of an attached cluster names an agent
	// before adopt hands it to one.
	ErrAgentBeforeAdopt = errors.New("a member of an attached cluster names an agent before it is adopted")
)

// podHost is the resolver of a spec whose hosts are pods (PodHosts): an
// IP literal normalized, a name as it is, lower-cased, never looked up.
func podHost(h string) ([]string, error) {
	if ip := net.ParseIP(h); ip != nil {
		return []string{ip.String()}, nil
	}
	if h == "" {
		return nil, errors.New("empty host")
	}
	return []string{strings.ToLower(h)}, nil
}

// dnsNameRE is a DNS name: dot-separated labels of letters, digits and
// '-', each starting and ending with a letter or digit.
var dnsNameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// externalNameRE is the name of a member of an attached cluster: etcd's
// own (kubeadm names members after their nodes' host names).
var externalNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)

var versionRE = regexp.MustCompile(`^3\.[0-9]+\.[0-9]+$`)

// Validate checks the spec. It returns every problem found joined in one
// error, and warnings for settings that are allowed but unwise.
func (c *Cluster) Validate(o ValidateOptions) (warnings []string, err error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	badKind := func(kind error, format string, a ...any) { errs = append(errs, refusal.New(kind, format, a...)) }

	if !nameRE.MatchString(c.Name) {
		bad("cluster name %q: use lower-case letters, digits and '-'", c.Name)
	}
	if c.Token == "" {
		bad("token is empty: set a token unique to this cluster")
	}
	external := c.External != nil
	switch {
	case !versionRE.MatchString(c.Version):
		bad("version %q: want an etcd release like 3.6.16", c.Version)
	case o.KnownVersion != nil && !external: // an attached cluster's binaries are not Steward's
		if verr := o.KnownVersion(c.Version); verr != nil {
			bad("version %s: %w", c.Version, verr)
		}
	}
	switch c.Etcd.AutoCompactionMode {
	case "", "periodic", "revision":
	default:
		bad("etcd.autoCompactionMode %q: use periodic or revision", c.Etcd.AutoCompactionMode)
	}
	if c.Etcd.QuotaBackendBytes < 0 {
		bad("etcd.quotaBackendBytes %d is negative", c.Etcd.QuotaBackendBytes)
	}
	if c.Etcd.QuotaBackendBytes > 8<<30 {
		warnings = append(warnings, fmt.Sprintf("etcd.quotaBackendBytes %d is above 8 GiB, etcd's suggested maximum", c.Etcd.QuotaBackendBytes))
	}
	if c.Etcd.ElectionTimeoutMs > 0 && c.Etcd.HeartbeatIntervalMs > 0 &&
		c.Etcd.ElectionTimeoutMs < 5*c.Etcd.HeartbeatIntervalMs {
		bad("etcd.electionTimeoutMs %d must be at least 5 times heartbeatIntervalMs %d",
			c.Etcd.ElectionTimeoutMs, c.Etcd.HeartbeatIntervalMs)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Etcd.ExtraFlags)) {
		if ferr := CheckExtraFlag(k); ferr != nil {
			bad("etcd.extraFlags %v", ferr)
		}
	}

	if !c.TLS.Disabled {
		_, verrs := c.TLS.validity()
		errs = append(errs, verrs...)
	}
	for _, n := range c.TLS.ServerNames {
		if !dnsNameRE.MatchString(n) {
			bad("tls.serverNames %q: want a DNS name such as db-client.prod.svc.cluster.local", n)
		}
	}

	if c.Backup.FullSchedule != "" {
		if _, err := cron.ParseStandard(c.Backup.FullSchedule); err != nil {
			bad("backup.fullSchedule %q: %v", c.Backup.FullSchedule, err)
		}
	}
	if s3 := c.Backup.S3; s3 != nil {
		if u, err := url.Parse(s3.Endpoint); err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
			bad("backup.s3.endpoint %q: want https://host[:port]", s3.Endpoint)
		}
		if s3.Bucket == "" {
			bad("backup.s3.bucket is empty")
		}
	}
	switch c.Backup.Compression {
	case "", "fastest", "default", "better", "none":
	default:
		bad("backup.compression %q: use fastest, default, better or none", c.Backup.Compression)
	}
	if tl := c.Timeline; tl != nil && (tl.ID < 1 || tl.Parent < 0 || tl.Parent >= tl.ID || tl.BranchRevision < 0 || tl.StartRevision < tl.BranchRevision) {
		bad("timeline %+v contradicts itself (a restore writes it: id at least 1, parent an older timeline, startRevision at or above branchRevision); restore it from the backup store's timelines/ history or remove it", *tl)
	}
	if c.Backup.MaxDeltasPerFull < 0 || c.Backup.DeltaMaxAgeMs < 0 {
		bad("backup.maxDeltasPerFull and backup.deltaMaxAgeMs must not be negative")
	}
	if ca := c.Backup.CompactAfter; ca != nil {
		switch {
		case ca.Deltas < 0:
			bad("backup.compactAfter.deltas %d is negative: give the number of delta segments after a full backup that starts a compaction (0: no bound by count)", ca.Deltas)
		case ca.Bytes < 0:
			bad("backup.compactAfter.bytes %d is negative: give the stored size of the deltas after a full backup that starts a compaction (0: no bound by size)", ca.Bytes)
		case ca.Deltas == 0 && ca.Bytes == 0:
			bad("backup.compactAfter sets neither deltas nor bytes: set at least one bound, or remove compactAfter to never compact")
		}
	}

	switch c.Recovery.Mode {
	case "", "manual", "auto":
	default:
		bad("recovery.mode %q: use manual or auto", c.Recovery.Mode)
	}

	if e := c.External; e != nil {
		// All three empty: Steward took over issuing (`steward certs
		// take-over`) and dials with its own certificate directory.
		if c.OperatorCerts() {
			for _, f := range []struct{ field, path string }{{"caFile", e.CAFile}, {"certFile", e.CertFile}, {"keyFile", e.KeyFile}} {
				if f.path == "" && !c.TLS.Disabled {
					badKind(ErrOperatorFileEmpty, "external.%s is empty: an attached cluster is reached with the operator's own certificate (leave all three empty only after the certificate take-over)", f.field)
				}
			}
		} else if !c.TLS.Disabled {
			for _, m := range c.Members {
				if m.Adopted != nil && m.Adopted.TLS != nil {
					bad("member %s: adopted.tls names certificate files, but the external block names none (Steward took over issuing): remove adopted.tls", m.Name)
				}
			}
		}
		if c.Recovery.Mode == "auto" {
			bad("recovery.mode auto: Steward does not run the members of an attached cluster, so it cannot recover them; use manual")
		}
	}

	resolve := o.resolver()
	if c.PodHosts {
		// Member pods' DNS names resolve only while the pods run: a
		// name stands for itself (one name, one pod).
		resolve = podHost
	}
	agents := map[string]bool{}
	// hostIPs holds each remote agent's resolved addresses; hostOf maps
	// an address to the agent whose host it is (one agent per host).
	hostIPs := map[string][]string{}
	hostOf := map[string]string{}
	for _, a := range c.Agents {
		if !nameRE.MatchString(a.Name) {
			bad("agent name %q: use lower-case letters, digits and '-'", a.Name)
		}
		if agents[a.Name] {
			bad("agent %q is listed twice", a.Name)
		}
		agents[a.Name] = true
		if !a.Remote() {
			if !strings.HasPrefix(a.Address, "unix://") {
				bad("agent %s address %q: want unix:///path/to/agent.sock for an agent on this machine, or host and port for one on another host", a.Name, a.Address)
			}
			continue
		}
		if a.Address != "" {
			bad("agent %s: give either address (a local Unix socket) or host and port, not both", a.Name)
		}
		if a.Port < 1 || a.Port > 65535 {
			bad("agent %s: port %d: want the agent API's TCP port (1-65535)", a.Name, a.Port)
		}
		ips, rerr := resolve(a.Host)
		if rerr != nil {
			bad("agent %s: %v", a.Name, rerr)
			continue
		}
		hostIPs[a.Name] = ips
		for _, ip := range ips {
			if other, ok := hostOf[ip]; ok {
				bad("agents %s and %s are both on host %s: run one agent per host", other, a.Name, ip)
				break
			}
			hostOf[ip] = a.Name
		}
	}

	// metricsAddrs holds each agent's metrics IP:port, checked against
	// the members' addresses below.
	metricsAddrs := map[string]string{}
	for _, a := range c.Agents {
		if a.MetricsAddress == "" {
			continue
		}
		host, port, serr := net.SplitHostPort(a.MetricsAddress)
		pn, perr := strconv.Atoi(port)
		if serr != nil || host == "" || perr != nil || pn < 1 || pn > 65535 {
			bad("agent %s metricsAddress %q: want HOST:PORT (e.g. 127.0.0.1:9379), or leave it empty to serve no metrics", a.Name, a.MetricsAddress)
			continue
		}
		ips, rerr := resolve(host)
		if rerr != nil {
			bad("agent %s metricsAddress: %v", a.Name, rerr)
			continue
		}
		if want, remote := hostIPs[a.Name]; remote && !IsLoopback(a.MetricsAddress) && !overlap(ips, want) {
			bad("agent %s metricsAddress %s: %s is not the agent's host (%s): serve metrics on the host's address or on loopback", a.Name, a.MetricsAddress, host, a.Host)
			continue
		}
		for _, ip := range ips {
			key := net.JoinHostPort(ip, port)
			if other, ok := metricsAddrs[key]; ok && (!c.MultiHost() || !IsLoopback(a.MetricsAddress)) {
				bad("agent %s metricsAddress %s: already the metrics address of agent %s", a.Name, a.MetricsAddress, other)
				break
			}
			metricsAddrs[key] = a.Name
		}
	}

	if len(c.Members) == 0 {
		bad("no members: a cluster needs at least one")
	}
	names := map[string]bool{}
	// addrs holds every resolved IP:port a member binds, so two members
	// never share one whatever their URLs call the host.
	addrs := map[string]string{}
	votersOn := map[string][]string{}
	dirs := map[string]string{}
	for _, m := range c.Members {
		switch {
		case external && !externalNameRE.MatchString(m.Name):
			bad("member name %q: an attached member's name is etcd's: letters, digits, '.', '_' and '-'", m.Name)
		case !external && !nameRE.MatchString(m.Name):
			bad("member name %q: use lower-case letters, digits and '-'", m.Name)
		}
		if names[m.Name] {
			bad("member %q is listed twice: member names must be unique", m.Name)
		}
		if m.Version != "" {
			if !versionRE.MatchString(m.Version) {
				bad("member %s: version %q: want an etcd release like 3.6.16", m.Name, m.Version)
			} else if o.KnownVersion != nil {
				if verr := o.KnownVersion(m.Version); verr != nil {
					bad("member %s: version %s: %w", m.Name, m.Version, verr)
				}
			}
		}
		names[m.Name] = true
		switch {
		case external && m.Agent != "" && m.Adopted == nil:
			badKind(ErrAgentBeforeAdopt, "member %s: agent %q: the members of an attached cluster run under no agent until adopt hands them to one (leave agent empty)", m.Name, m.Agent)
		case external && m.Adopted != nil && (!agents[m.Agent] || m.DataDir == ""):
			bad("member %s: adopted, but its agent %q is not in the agents list or its dataDir is empty", m.Name, m.Agent)
		case !external && m.Adopted != nil:
			bad("member %s: adopted is set, but the cluster is not attached (no external block)", m.Name)
		case !external && !agents[m.Agent]:
			bad("member %s: agent %q is not in the agents list", m.Name, m.Agent)
		}
		for _, u := range []struct{ what, raw string }{{"clientURL", m.ClientURL}, {"peerURL", m.PeerURL}} {
			scheme := c.Scheme()
			if external && u.what == "peerURL" && strings.HasPrefix(u.raw, "http://") {
				// Someone else's members may keep their peers in clear.
				scheme = "http"
			}
			hp, uerr := checkURL(u.raw, scheme)
			if uerr != nil {
				bad("member %s %s: %v", m.Name, u.what, uerr)
				continue
			}
			host, port, _ := net.SplitHostPort(hp)
			ips, rerr := resolve(host)
			if rerr != nil {
				bad("member %s %s: %v", m.Name, u.what, rerr)
				continue
			}
			if want, remote := hostIPs[m.Agent]; remote && !overlap(ips, want) {
				a, _ := c.Agent(m.Agent)
				bad("member %s %s %s: %s is not the host of agent %s (%s): a member binds its agent's host address", m.Name, u.what, u.raw, host, m.Agent, a.Host)
			}
			// A wildcard address (0.0.0.0, ::) binds the port on every
			// address of its machine: it collides with any other use of
			// the port there.
			machine := "local"
			if a, ok := c.Agent(m.Agent); ok && a.Remote() {
				machine = a.Name
			}
			wildKey, portKey := machine+" *:"+port, machine+" :"+port
			for _, ip := range ips {
				other, ok := addrs[net.JoinHostPort(ip, port)]
				if !ok {
					other, ok = addrs[wildKey]
				}
				if !ok && net.ParseIP(ip).IsUnspecified() {
					other, ok = addrs[portKey]
				}
				if ok {
					bad("member %s %s %s: address already used by %s", m.Name, u.what, hp, other)
					break
				}
			}
			for _, ip := range ips {
				key := net.JoinHostPort(ip, port)
				addrs[key] = m.Name + " " + u.what
				if net.ParseIP(ip).IsUnspecified() {
					addrs[wildKey] = m.Name + " " + u.what
				}
				if _, ok := addrs[portKey]; !ok {
					addrs[portKey] = m.Name + " " + u.what
				}
				if a, ok := metricsAddrs[key]; ok && (!c.MultiHost() || a == m.Agent || !IsLoopback(key)) {
					bad("member %s %s %s: address already used by agent %s's metricsAddress", m.Name, u.what, hp, a)
				}
			}
		}
		votersOn[m.Agent] = append(votersOn[m.Agent], m.Name)
		if external {
			// Its data dir is on a machine Steward may not even reach.
		} else if m.DataDir == "" {
			bad("member %s: dataDir is empty", m.Name)
		} else if other, ok := dirs[m.Agent+"/"+m.DataDir]; ok {
			bad("member %s: dataDir %s is also used by %s", m.Name, m.DataDir, other)
		} else {
			dirs[m.Agent+"/"+m.DataDir] = m.Name
		}
	}
	if c.MultiHost() {
		for _, a := range c.Agents {
			if on := votersOn[a.Name]; len(on) > 1 {
				warnings = append(warnings, fmt.Sprintf(
					"members %s share host %s: losing that host loses %d votes at once; spread voting members over hosts",
					strings.Join(on, ", "), a.Name, len(on)))
			}
		}
		if c.Backup.Continuous && c.Backup.S3 == nil && !c.Backup.StoreShared {
			bad("backup: continuous backups of a multi-host cluster need a store every host reaches: set backup.s3, or backup.storeShared: true when backup.store is a shared file system mounted at the same path on every host")
		}
	}
	if n := len(c.Members); n > 0 && n%2 == 0 {
		warnings = append(warnings, fmt.Sprintf(
			"%d members: an even member count tolerates no more failures than %d members; prefer an odd count", n, n-1))
	}
	return warnings, errors.Join(errs...)
}

func overlap(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

func checkURL(raw, scheme string) (hostPort string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%q does not parse: %v", raw, err)
	}
	if u.Scheme != scheme {
		return "", fmt.Errorf("%q: scheme must be %s (TLS is %s)", raw, scheme, map[bool]string{true: "on", false: "off"}[scheme == "https"])
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" || port == "" {
		return "", fmt.Errorf("%q: want %s://HOST:PORT", raw, scheme)
	}
	if u.Path != "" && u.Path != "/" {
		return "", fmt.Errorf("%q: a member URL has no path", raw)
	}
	return u.Host, nil
}
