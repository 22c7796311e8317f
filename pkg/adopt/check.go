package adopt

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/spec"
)

// CheckMember refuses a MemberRun whose data dir does not hold the member
// the cluster knows by the run's name: the member ID its WAL records
// (read without etcd, while the member runs) must be that member's, and
// its cluster ID the cluster's (clusterID 0 skips that). members and
// clusterID are what the cluster reports (clientv3 MemberList). It
// returns the member's ID.
func CheckMember(r MemberRun, clusterID uint64, members []*etcdserverpb.Member) (uint64, error) {
	var want *etcdserverpb.Member
	for _, m := range members {
		if m.Name == r.Name {
			want = m
			break
		}
	}
	if want == nil {
		var names []string
		for _, m := range members {
			names = append(names, m.Name)
		}
		slices.Sort(names)
		return 0, refusal.New(ErrNotThisMember, "the cluster has no member named %s (it has %s): the %s describes a member of another cluster, or one not started yet",
			r.Name, strings.Join(names, ", "), r.Source)
	}
	walDir := r.WALDir
	if walDir == "" {
		walDir = datadir.WALDir(r.DataDir)
	}
	id, cid, err := datadir.MemberID(walDir)
	if err != nil {
		return 0, refusal.New(ErrNotThisMember, "data dir %s of member %s (%s) holds no member: %v", r.DataDir, r.Name, r.Source, err)
	}
	if clusterID != 0 && cid != clusterID {
		return 0, refusal.New(ErrNotThisMember, "data dir %s of member %s (%s) belongs to cluster %x, not to this cluster (%x): point the %s at the member's own data dir",
			r.DataDir, r.Name, r.Source, cid, clusterID, r.Source.Kind)
	}
	if id != want.ID {
		return 0, refusal.New(ErrNotThisMember, "data dir %s holds member %x, but the cluster knows %s as member %x: the %s names another member's data dir; fix it before adopting",
			r.DataDir, id, r.Name, want.ID, r.Source)
	}
	return id, nil
}

// Difference is a flag Steward would set differently from how the member
// runs today. An empty value means the flag is not given (etcd's default).
type Difference struct {
	Flag    string `json:"flag"`
	Current string `json:"current"`
	Steward string `json:"steward"`
}

// listFlags hold comma-separated lists whose order does not matter.
var listFlags = map[string]bool{
	"listen-client-urls": true, "advertise-client-urls": true, "listen-peer-urls": true,
	"initial-advertise-peer-urls": true, "listen-metrics-urls": true, "initial-cluster": true,
	"cipher-suites": true, "peer-cert-allowed-cn": true, "peer-cert-allowed-hostname": true,
	"client-cert-allowed-hostname": true, "cors": true, "host-whitelist": true,
}

// EffectiveFlags returns the flags the member runs with, as etcd reads
// them: the normalized fields spelt as flags (etcd's defaults included)
// and the remaining flags.
func (r MemberRun) EffectiveFlags() map[string]string {
	f := maps.Clone(r.Flags)
	if f == nil {
		f = map[string]string{}
	}
	set := func(k, v string) {
		if v != "" {
			f[k] = v
		}
	}
	set("name", r.Name)
	set("data-dir", r.DataDir)
	set("wal-dir", r.WALDir)
	set("listen-client-urls", strings.Join(r.ListenClientURLs, ","))
	set("advertise-client-urls", strings.Join(r.AdvertiseClientURLs, ","))
	set("listen-peer-urls", strings.Join(r.ListenPeerURLs, ","))
	set("initial-advertise-peer-urls", strings.Join(r.InitialAdvertisePeerURLs, ","))
	set("initial-cluster", r.InitialCluster)
	set("initial-cluster-state", r.InitialClusterState)
	set("initial-cluster-token", r.InitialClusterToken)
	set("cert-file", r.ClientTLS.CertFile)
	set("key-file", r.ClientTLS.KeyFile)
	set("trusted-ca-file", r.ClientTLS.TrustedCAFile)
	set("peer-cert-file", r.PeerTLS.CertFile)
	set("peer-key-file", r.PeerTLS.KeyFile)
	set("peer-trusted-ca-file", r.PeerTLS.TrustedCAFile)
	if r.ClientTLS.ClientCertAuth {
		f["client-cert-auth"] = "true"
	}
	if r.PeerTLS.ClientCertAuth {
		f["peer-client-cert-auth"] = "true"
	}
	return f
}

// Differences lists, sorted by flag, every flag whose value differs
// between how the member runs (r) and the command line Steward would run
// it with (steward: --name=value arguments, as the agent builds them).
// initial-cluster-state is left out: etcd reads it only on a data dir's
// first start, and an adopted member's data dir has started. Lists of
// URLs compare as sets; a boolean flag set to false equals one not given.
func Differences(r MemberRun, steward []string) []Difference {
	cur := r.EffectiveFlags()
	want := map[string]string{}
	for _, a := range steward {
		k, v, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !ok {
			v = "true"
		}
		want[k] = v
	}
	var out []Difference
	keys := slices.Sorted(maps.Keys(maps.Collect(func(yield func(string, struct{}) bool) {
		for k := range cur {
			yield(k, struct{}{})
		}
		for k := range want {
			yield(k, struct{}{})
		}
	})))
	for _, k := range keys {
		if k == "initial-cluster-state" {
			continue
		}
		c, w := canonical(k, cur[k]), canonical(k, want[k])
		if c != w {
			out = append(out, Difference{Flag: k, Current: cur[k], Steward: want[k]})
		}
	}
	return out
}

func canonical(flag, v string) string {
	if b, err := strconv.ParseBool(v); err == nil && !b {
		return ""
	}
	if listFlags[flag] {
		parts := strings.Split(v, ",")
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		slices.Sort(parts)
		return strings.Join(slices.Compact(parts), ",")
	}
	return v
}

// fields are the flags a MemberConfig holds in fields of its own.
var fields = []string{"quota-backend-bytes", "auto-compaction-mode", "auto-compaction-retention",
	"snapshot-count", "heartbeat-interval", "election-timeout"}

// MemberConfig is the agent's member config that runs the member as close
// to how it runs now as Steward can: its name, data dir, first advertised
// client and peer URLs (Steward listens where it advertises), initial
// cluster, TLS files (one CA: the client side's), the settings the spec
// holds, and every other flag as an extra flag where Steward allows it.
// Steward's own client certificate and the binary store are the caller's
// to fill in. Differences of its flags show what is lost.
func (r MemberRun) MemberConfig() (memberrt.MemberConfig, error) {
	c := memberrt.MemberConfig{
		Name: r.Name, Version: r.Version, DataDir: r.DataDir,
		InitialCluster: r.InitialCluster, InitialClusterState: r.InitialClusterState,
		InitialClusterToken: r.InitialClusterToken,
	}
	if len(r.AdvertiseClientURLs) > 0 {
		c.ClientURL = r.AdvertiseClientURLs[0]
	}
	if len(r.InitialAdvertisePeerURLs) > 0 {
		c.PeerURL = r.InitialAdvertisePeerURLs[0]
	}
	if r.ClientTLS.CertFile != "" || r.PeerTLS.CertFile != "" {
		c.TLS = &memberrt.TLSFiles{
			CA:         r.ClientTLS.TrustedCAFile,
			ServerCert: r.ClientTLS.CertFile, ServerKey: r.ClientTLS.KeyFile,
			PeerCert: r.PeerTLS.CertFile, PeerKey: r.PeerTLS.KeyFile,
			// The peer port keeps letting in what it let in: one name,
			// or (etcd's default) any certificate of its CA.
			PeerAllowedCN: r.Flags["peer-cert-allowed-cn"],
		}
		c.TLS.PeerAnyCN = c.TLS.PeerAllowedCN == ""
	}
	num := func(k string) (int64, error) {
		v, ok := r.Flags[k]
		if !ok {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, refusal.New(ErrSource, "member %s: --%s=%q is not a number", r.Name, k, v)
		}
		return n, nil
	}
	var err error
	if c.QuotaBackendBytes, err = num("quota-backend-bytes"); err != nil {
		return memberrt.MemberConfig{}, err
	}
	snap, err := num("snapshot-count")
	if err != nil {
		return memberrt.MemberConfig{}, err
	}
	c.SnapshotCount = uint64(max(snap, 0))
	hb, err := num("heartbeat-interval")
	if err != nil {
		return memberrt.MemberConfig{}, err
	}
	el, err := num("election-timeout")
	if err != nil {
		return memberrt.MemberConfig{}, err
	}
	c.HeartbeatIntervalMs, c.ElectionTimeoutMs = int(hb), int(el)
	c.AutoCompactionMode, c.AutoCompactionRetention = r.Flags["auto-compaction-mode"], r.Flags["auto-compaction-retention"]
	for _, k := range slices.Sorted(maps.Keys(r.Flags)) {
		if slices.Contains(fields, k) || spec.CheckExtraFlag(k) != nil {
			continue
		}
		if c.ExtraFlags == nil {
			c.ExtraFlags = map[string]string{}
		}
		c.ExtraFlags[k] = r.Flags[k]
	}
	return c, nil
}

// ErrNotAttached: the Steward directory holds no attached cluster to check
// a member against (`steward attach` writes one).
var ErrNotAttached = errors.New("no attached cluster to check the member against")

// CheckAttached is CheckMember against the attached cluster c: its
// member list (a linearizable read through the operator's certificate) and
// the cluster ID `steward attach` recorded. A cluster Steward runs already
// is refused (ErrNotAttached): its members need no adopting.
func CheckAttached(ctx context.Context, c *cluster.Cluster, r MemberRun) (uint64, error) {
	if !c.Spec.IsExternal() {
		return 0, refusal.New(ErrNotAttached, "cluster %s in %s is run by Steward, not attached: its members need no adopting", c.Spec.Name, c.Dir)
	}
	var clusterID uint64
	if s := c.Spec.External.ClusterID; s != "" {
		id, err := strconv.ParseUint(s, 16, 64)
		if err != nil {
			return 0, fmt.Errorf("the spec's external cluster ID %q: %w", s, err)
		}
		clusterID = id
	}
	cli, err := c.Client()
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := cli.MemberList(lctx)
	if err != nil {
		return 0, fmt.Errorf("list the members of %s: %w", c.Spec.Name, err)
	}
	if clusterID != 0 && list.Header.ClusterId != clusterID {
		return 0, refusal.New(ErrNotThisMember, "the endpoints of %s now answer for cluster %x, not %x as when it was attached", c.Spec.Name, list.Header.ClusterId, clusterID)
	}
	return CheckMember(r, clusterID, list.Members)
}
