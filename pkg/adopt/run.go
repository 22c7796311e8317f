// Package adopt is the discovery half of `steward adopt`: how is an etcd
// member that Steward did not start run today, and can Steward run it the
// same way. It reads a member's configuration from what its host has (a
// kubeadm static pod manifest, a systemd unit, a running process'
// /proc/PID/cmdline and environ, the etcd config file any of them names),
// merges flags, ETCD_* variables and the config file with etcd's own
// precedence into one MemberRun, lists the flags Steward would set
// differently (Differences), and refuses what Steward cannot take over: a
// flag etcd does not know or Steward cannot keep, and a data dir that does
// not hold the member the cluster knows by that name (CheckMember).
//
// Discovery changes nothing on the host. The adopt plan (stopping the old
// process, starting the member under the agent) builds on it.
package adopt

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/etcd-steward/steward/pkg/refusal"
)

// Kinds of Source.
const (
	KindManifest = "manifest"
	KindUnit     = "unit"
	KindProcess  = "process"
)

// Source says where a MemberRun was read from.
type Source struct {
	// Kind is manifest, unit or process.
	Kind string `json:"kind"`
	// Path is the manifest's or unit's file.
	Path string `json:"path,omitempty"`
	// DropIns are the unit's drop-in files read after it, in the order
	// systemd applies them.
	DropIns []string `json:"dropIns,omitempty"`
	// PID is the process read.
	PID int `json:"pid,omitempty"`
	// ConfigFile is the etcd config file the member reads (then etcd
	// ignores its command line and ETCD_* variables).
	ConfigFile string `json:"configFile,omitempty"`
}

// TLS is one side's (client or peer) certificate files and checks.
type TLS struct {
	CertFile      string `json:"certFile,omitempty"`
	KeyFile       string `json:"keyFile,omitempty"`
	TrustedCAFile string `json:"trustedCAFile,omitempty"`
	// ClientCertAuth: connections must present a certificate the trusted
	// CA signed.
	ClientCertAuth bool `json:"clientCertAuth"`
}

// MemberRun is how an etcd member runs, normalized: the effective values
// of the flags Steward decides (etcd's defaults where none was given),
// host paths (a static pod's container paths translated through its
// hostPath volumes), and every other flag verbatim.
type MemberRun struct {
	Name                     string   `json:"name"`
	DataDir                  string   `json:"dataDir"`
	WALDir                   string   `json:"walDir,omitempty"`
	ListenClientURLs         []string `json:"listenClientURLs"`
	AdvertiseClientURLs      []string `json:"advertiseClientURLs"`
	ListenPeerURLs           []string `json:"listenPeerURLs"`
	InitialAdvertisePeerURLs []string `json:"initialAdvertisePeerURLs"`
	InitialCluster           string   `json:"initialCluster"`
	InitialClusterState      string   `json:"initialClusterState"`
	InitialClusterToken      string   `json:"initialClusterToken"`
	ClientTLS                TLS      `json:"clientTLS"`
	PeerTLS                  TLS      `json:"peerTLS"`
	// Version is the etcd version of the member's binary ("" when it could
	// not be told: no binary on this host, no version in the image tag).
	Version string `json:"version,omitempty"`
	// Binary is the etcd program on the host (a process' or unit's), or
	// the container image of a static pod.
	Binary string `json:"binary,omitempty"`
	// Flags are the remaining effective flags, verbatim (name without
	// dashes to value; "true" for a boolean flag given alone).
	Flags map[string]string `json:"flags,omitempty"`
	// Ignored are what etcd reads past: ETCD_* variables naming no flag,
	// and with a config file every command-line flag and variable.
	Ignored []string `json:"ignored,omitempty"`
	Source  Source   `json:"source"`
}

// normalized are the flags MemberRun holds in fields.
var normalized = []string{
	"name", "data-dir", "wal-dir", "listen-client-urls", "advertise-client-urls",
	"listen-peer-urls", "initial-advertise-peer-urls", "initial-cluster",
	"initial-cluster-state", "initial-cluster-token",
	"cert-file", "key-file", "trusted-ca-file", "client-cert-auth",
	"peer-cert-file", "peer-key-file", "peer-trusted-ca-file", "peer-client-cert-auth",
}

// newRun builds a MemberRun from effective flags; hostPath maps a path the
// member sees to the host's (identity but for a static pod), cwd resolves
// relative paths (etcd's default data dir is NAME.etcd in its working
// directory).
func newRun(flags map[string]string, hostPath func(string) string, cwd string) (MemberRun, error) {
	get := func(k, def string) string {
		if v, ok := flags[k]; ok {
			return v
		}
		return def
	}
	path := func(p string) string {
		if p == "" {
			return ""
		}
		if !filepath.IsAbs(p) && cwd != "" {
			p = filepath.Join(cwd, p)
		}
		if hostPath != nil {
			p = hostPath(p)
		}
		return filepath.Clean(p)
	}
	list := func(k, def string) []string {
		var out []string
		for _, u := range strings.Split(get(k, def), ",") {
			if u = strings.TrimSpace(u); u != "" {
				out = append(out, u)
			}
		}
		return out
	}
	boolean := func(k string) (bool, error) {
		v, ok := flags[k]
		if !ok {
			return false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, refusal.New(ErrSource, "flag --%s=%q is not true or false", k, v)
		}
		return b, nil
	}
	name := get("name", embed.DefaultName)
	r := MemberRun{
		Name:                     name,
		DataDir:                  path(get("data-dir", name+".etcd")),
		WALDir:                   path(get("wal-dir", "")),
		ListenClientURLs:         list("listen-client-urls", embed.DefaultListenClientURLs),
		AdvertiseClientURLs:      list("advertise-client-urls", embed.DefaultAdvertiseClientURLs),
		ListenPeerURLs:           list("listen-peer-urls", embed.DefaultListenPeerURLs),
		InitialAdvertisePeerURLs: list("initial-advertise-peer-urls", embed.DefaultInitialAdvertisePeerURLs),
		InitialCluster:           get("initial-cluster", ""),
		InitialClusterState:      get("initial-cluster-state", embed.ClusterStateFlagNew),
		InitialClusterToken:      get("initial-cluster-token", "etcd-cluster"),
		ClientTLS: TLS{
			CertFile: path(flags["cert-file"]), KeyFile: path(flags["key-file"]),
			TrustedCAFile: path(flags["trusted-ca-file"]),
		},
		PeerTLS: TLS{
			CertFile: path(flags["peer-cert-file"]), KeyFile: path(flags["peer-key-file"]),
			TrustedCAFile: path(flags["peer-trusted-ca-file"]),
		},
	}
	if r.InitialCluster == "" {
		// etcd's default: this member alone, at its advertised peer URLs
		// (embed.Config.InitialClusterFromName).
		var parts []string
		for _, u := range r.InitialAdvertisePeerURLs {
			parts = append(parts, name+"="+u)
		}
		r.InitialCluster = strings.Join(parts, ",")
	}
	var err error
	if r.ClientTLS.ClientCertAuth, err = boolean("client-cert-auth"); err != nil {
		return MemberRun{}, err
	}
	if r.PeerTLS.ClientCertAuth, err = boolean("peer-client-cert-auth"); err != nil {
		return MemberRun{}, err
	}
	for _, k := range slices.Sorted(maps.Keys(flags)) {
		if slices.Contains(normalized, k) || k == "config-file" {
			continue
		}
		if r.Flags == nil {
			r.Flags = map[string]string{}
		}
		r.Flags[k] = flags[k]
	}
	return r, nil
}

// unsupported are flags Steward cannot keep when it runs a member, and
// why. Other flags Steward sets differently are Differences, shown to the
// operator; these would change how safe or where the member is.
var unsupported = map[string]string{
	"wal-dir":                 "keeps the WAL outside the data dir; Steward runs members with the WAL in DATA_DIR/member/wal: move it there (stop the member, move the files, drop the flag) first",
	"unsafe-no-fsync":         "turns off fsync, so a crash can lose acknowledged writes",
	"force-new-cluster":       "rewrites the membership at every start",
	"auto-tls":                "makes throw-away client certificates; Steward runs members with certificate files",
	"peer-auto-tls":           "makes throw-away peer certificates; Steward runs members with certificate files",
	"listen-client-http-urls": "serves plain HTTP beside gRPC on other URLs, which Steward does not set up",
	"discovery":               "finds its cluster through a discovery service; Steward gives members --initial-cluster",
	// discovery stands for every discovery-* flag but those below.
	"discovery-srv": "finds its cluster through DNS SRV records; Steward gives members --initial-cluster",
	"proxy":         "runs etcd 3.5's v2 proxy, which later versions dropped",
}

// Check refuses a MemberRun Steward cannot run the same way, naming every
// flag at fault and why, in one error.
func Check(r MemberRun) error {
	var problems []string
	flags := maps.Clone(r.Flags)
	if r.WALDir != "" {
		if flags == nil {
			flags = map[string]string{}
		}
		flags["wal-dir"] = r.WALDir
	}
	for _, k := range slices.Sorted(maps.Keys(flags)) {
		base := strings.TrimPrefix(k, "experimental-")
		if strings.HasPrefix(base, "discovery-") && base != "discovery-srv" && base != "discovery-fallback" {
			base = "discovery"
		}
		if why, ok := unsupported[base]; ok {
			if v := flags[k]; v == "false" || v == "" || base == "proxy" && v == "off" {
				continue
			}
			problems = append(problems, "--"+k+" "+why)
		}
	}
	if len(problems) > 0 {
		return refusal.New(ErrUnsupported, "member %s (%s) runs with flags Steward cannot keep: %s", r.Name, r.Source, strings.Join(problems, "; "))
	}
	return nil
}

func (s Source) String() string {
	var out string
	switch s.Kind {
	case KindProcess:
		out = fmt.Sprintf("process %d", s.PID)
	default:
		out = s.Kind + " " + s.Path
	}
	if s.ConfigFile != "" {
		out += ", config file " + s.ConfigFile
	}
	return out
}
