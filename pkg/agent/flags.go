package agent

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/catalogue"
	"github.com/etcd-steward/steward/pkg/spec"
)

// EtcdFlags returns the etcd command-line flags for a member config. Extra
// flags are spelled for the member's version as the catalogue says (a flag
// etcd renamed gets the name that version knows). It is pure so the mapping
// from spec to flags can be tested without a process.
func EtcdFlags(c agentapi.MemberConfig, cat *catalogue.Catalogue) ([]string, error) {
	extra, err := cat.Flags(c.Version, c.ExtraFlags)
	if err != nil {
		return nil, fmt.Errorf("member %s: %w", c.Name, err)
	}
	f := []string{
		"--name=" + c.Name,
		"--data-dir=" + c.DataDir,
		"--listen-client-urls=" + c.ClientURL,
		"--advertise-client-urls=" + c.ClientURL,
		"--listen-peer-urls=" + c.PeerURL,
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
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		f = append(f, "--"+strings.TrimLeft(k, "-")+"="+extra[k])
	}
	return f, nil
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
