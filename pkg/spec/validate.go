package spec

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/robfig/cron/v3"
)

// ValidateOptions carry what validation needs from outside the spec.
type ValidateOptions struct {
	// KnownVersion returns nil when the etcd version can be run (it is in
	// the binary store or is the embedded version). Nil skips the check.
	KnownVersion func(version string) error
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

var versionRE = regexp.MustCompile(`^3\.[0-9]+\.[0-9]+$`)

// Validate checks the spec. It returns every problem found joined in one
// error, and warnings for settings that are allowed but unwise.
func (c *Cluster) Validate(o ValidateOptions) (warnings []string, err error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	if !nameRE.MatchString(c.Name) {
		bad("cluster name %q: use lower-case letters, digits and '-'", c.Name)
	}
	if c.Token == "" {
		bad("token is empty: set a token unique to this cluster")
	}
	switch {
	case !versionRE.MatchString(c.Version):
		bad("version %q: want an etcd release like 3.6.16", c.Version)
	case o.KnownVersion != nil:
		if verr := o.KnownVersion(c.Version); verr != nil {
			bad("version %s: %v", c.Version, verr)
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
	if c.Backup.MaxDeltasPerFull < 0 || c.Backup.DeltaMaxAgeMs < 0 {
		bad("backup.maxDeltasPerFull and backup.deltaMaxAgeMs must not be negative")
	}

	switch c.Recovery.Mode {
	case "", "manual", "auto":
	default:
		bad("recovery.mode %q: use manual or auto", c.Recovery.Mode)
	}

	agents := map[string]bool{}
	for _, a := range c.Agents {
		if !nameRE.MatchString(a.Name) {
			bad("agent name %q: use lower-case letters, digits and '-'", a.Name)
		}
		if agents[a.Name] {
			bad("agent %q is listed twice", a.Name)
		}
		agents[a.Name] = true
		if !strings.HasPrefix(a.Address, "unix://") {
			bad("agent %s address %q: want unix:///path/to/agent.sock (agents on other hosts are not supported yet)", a.Name, a.Address)
		}
	}

	if len(c.Members) == 0 {
		bad("no members: a cluster needs at least one")
	}
	names := map[string]bool{}
	addrs := map[string]string{}
	dirs := map[string]string{}
	for _, m := range c.Members {
		if !nameRE.MatchString(m.Name) {
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
					bad("member %s: version %s: %v", m.Name, m.Version, verr)
				}
			}
		}
		names[m.Name] = true
		if !agents[m.Agent] {
			bad("member %s: agent %q is not in the agents list", m.Name, m.Agent)
		}
		for _, u := range []struct{ what, raw string }{{"clientURL", m.ClientURL}, {"peerURL", m.PeerURL}} {
			hp, uerr := checkURL(u.raw, c.Scheme())
			if uerr != nil {
				bad("member %s %s: %v", m.Name, u.what, uerr)
				continue
			}
			key := m.Agent + "/" + hp
			if other, ok := addrs[key]; ok {
				bad("member %s %s %s: address already used by %s", m.Name, u.what, hp, other)
			}
			addrs[key] = m.Name + " " + u.what
		}
		if m.DataDir == "" {
			bad("member %s: dataDir is empty", m.Name)
		} else if other, ok := dirs[m.Agent+"/"+m.DataDir]; ok {
			bad("member %s: dataDir %s is also used by %s", m.Name, m.DataDir, other)
		} else {
			dirs[m.Agent+"/"+m.DataDir] = m.Name
		}
	}
	if n := len(c.Members); n > 0 && n%2 == 0 {
		warnings = append(warnings, fmt.Sprintf(
			"%d members: an even member count tolerates no more failures than %d members; prefer an odd count", n, n-1))
	}
	return warnings, errors.Join(errs...)
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
