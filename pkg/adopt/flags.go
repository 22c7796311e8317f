package adopt

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"go.etcd.io/etcd/server/v3/embed"
	"sigs.k8s.io/yaml"

	"github.com/etcd-steward/steward/pkg/catalogue"
	"github.com/etcd-steward/steward/pkg/refusal"
)

// Sentinels of adopt's refusals (each wrapped in a *refusal.Refusal that
// names the problem).
var (
	// ErrUnknownFlag: the member runs with a flag etcd does not know (or
	// a stray argument); Steward cannot say how it would run it.
	ErrUnknownFlag = errors.New("unknown etcd flag")
	// ErrUnsupported: the member runs with a flag Steward cannot keep.
	ErrUnsupported = errors.New("unsupported etcd flag")
	// ErrSource: the manifest, unit, process or config file does not
	// describe an etcd member.
	ErrSource = errors.New("no etcd member described")
	// ErrNotThisMember: the data dir does not hold the member the cluster
	// knows by that name.
	ErrNotThisMember = errors.New("data dir holds another member")
)

// flagKinds maps every flag name etcd accepts to whether it is a boolean
// flag (given without a value). The names are those of the linked etcd
// server's command line (its embed.Config flags and etcdmain's own), plus
// the older spellings the version catalogue knows (renamed, turned into
// feature gates, removed) and 3.5's proxy flags: every flag of etcd 3.5,
// 3.6 and 3.7 is known.
var flagKinds = sync.OnceValue(func() map[string]bool {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	embed.NewConfig().AddFlags(fs)
	kinds := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		kinds[f.Name] = ok && b.IsBoolFlag()
	})
	// etcdmain's flags beside embed's.
	for _, n := range []string{"config-file", "discovery-fallback", "initial-cluster-state", "v2-deprecation"} {
		kinds[n] = false
	}
	kinds["version"] = true
	// etcd 3.5's v2 proxy, gone in 3.6 (and in no catalogue entry: it
	// was not renamed, and no version Steward runs accepts it).
	for _, n := range []string{"proxy", "proxy-dial-timeout", "proxy-failure-wait", "proxy-read-timeout", "proxy-refresh-interval", "proxy-write-timeout"} {
		kinds[n] = false
	}
	for _, m := range catalogue.Default().Minors {
		for old, renamed := range m.RenamedFlags {
			if _, ok := kinds[old]; !ok {
				kinds[old] = kinds[renamed]
			}
		}
		for f := range m.FeatureGateFlags {
			if _, ok := kinds[f]; !ok {
				kinds[f] = true
			}
		}
		for _, f := range m.RemovedFlags {
			if _, ok := kinds[f]; !ok {
				kinds[f] = strings.HasPrefix(f, "enable-") || strings.HasPrefix(f, "experimental-enable-")
			}
		}
	}
	return kinds
})

// knownFlag reports whether etcd accepts the flag, and whether it is a
// boolean one.
func knownFlag(name string) (known, isBool bool) {
	isBool, known = flagKinds()[name]
	return known, isBool
}

// parseArgs reads etcd's arguments (without the program name) the way Go's
// flag package does, as etcd does: -f and --f alike, -f=v or -f v (a
// boolean flag takes no separate value), "--" ends the flags, the last of a
// repeated flag wins. Values are kept verbatim. An unknown flag or a stray
// argument is a refusal.
func parseArgs(args []string) (map[string]string, error) {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				return nil, refusal.New(ErrUnknownFlag, "etcd would refuse argument %q: it takes no arguments besides flags", args[i+1])
			}
			break
		}
		if len(a) < 2 || a[0] != '-' {
			return nil, refusal.New(ErrUnknownFlag, "etcd would refuse argument %q: it takes no arguments besides flags", a)
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		name, val, hasVal := strings.Cut(name, "=")
		if name == "" || strings.HasPrefix(name, "-") {
			return nil, refusal.New(ErrUnknownFlag, "etcd would refuse argument %q: not a flag", a)
		}
		known, isBool := knownFlag(name)
		if !known {
			return nil, refusal.New(ErrUnknownFlag, "the member runs with --%s, a flag etcd does not know (Steward knows the flags of etcd 3.6 and the older spellings of its version catalogue): remove it before adopting the member", name)
		}
		switch {
		case hasVal:
		case isBool:
			val = "true"
		case i+1 < len(args):
			i++
			val = args[i]
		default:
			return nil, refusal.New(ErrUnknownFlag, "flag --%s has no value", name)
		}
		out[name] = val
	}
	return out, nil
}

// envFlags reads etcd's ETCD_* variables from KEY=VALUE pairs: the flag
// each names (ETCD_DATA_DIR is --data-dir), and the ETCD_* variables that
// name no flag, which etcd ignores (it warns about them).
func envFlags(env []string) (flags map[string]string, ignored []string) {
	flags = map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		rest, isEtcd := strings.CutPrefix(k, "ETCD_")
		if !ok || !isEtcd {
			continue
		}
		name := strings.ToLower(strings.ReplaceAll(rest, "_", "-"))
		if known, _ := knownFlag(name); !known || rest != strings.ToUpper(rest) {
			ignored = append(ignored, k)
			continue
		}
		flags[name] = v
	}
	sort.Strings(ignored)
	return flags, ignored
}

// configFileFlags reads an etcd config file (etcd's YAML keys, which are
// its flag names; client-transport-security and peer-transport-security
// hold the TLS keys, the peer ones spelt peer-KEY as flags). Lists become
// comma-separated values, as on the command line. Keys naming no flag are
// returned apart: etcd ignores them.
func configFileFlags(b []byte) (flags map[string]string, ignored []string, err error) {
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, nil, refusal.New(ErrSource, "etcd config file is not YAML: %v", err)
	}
	flags = map[string]string{}
	set := func(k string, v any) error {
		s, err := scalar(v)
		if err != nil {
			return refusal.New(ErrSource, "etcd config file key %s: %v", k, err)
		}
		if known, _ := knownFlag(k); !known {
			ignored = append(ignored, k)
			return nil
		}
		flags[k] = s
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		prefix, nested := map[string]string{"client-transport-security": "", "peer-transport-security": "peer-"}[k]
		if !nested {
			if err := set(k, v); err != nil {
				return nil, nil, err
			}
			continue
		}
		if v == nil {
			continue
		}
		sub, ok := v.(map[string]any)
		if !ok {
			return nil, nil, refusal.New(ErrSource, "etcd config file key %s is not a mapping", k)
		}
		for _, sk := range slices.Sorted(maps.Keys(sub)) {
			name := prefix + sk
			// The TLS keys are the client flags' names, and peer-NAME
			// under peer-transport-security, except the allowed names
			// (--peer-cert-allowed-cn, --client-cert-allowed-hostname).
			if sk == "allowed-cn" || sk == "allowed-hostname" {
				name = prefix + "cert-" + sk
				if prefix == "" {
					name = "client-cert-" + sk
				}
			}
			if err := set(name, sub[sk]); err != nil {
				return nil, nil, err
			}
		}
	}
	sort.Strings(ignored)
	return flags, ignored, nil
}

// scalar renders a YAML value as a flag value.
func scalar(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case bool:
		return fmt.Sprint(x), nil
	case float64:
		if x == float64(int64(x)) {
			return fmt.Sprint(int64(x)), nil
		}
		return fmt.Sprint(x), nil
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			s, err := scalar(e)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ","), nil
	}
	return "", fmt.Errorf("a %T, not a value", v)
}

// effective merges what etcd reads, with etcd's precedence
// (etcdmain/config.go, parse): a config file (--config-file, else
// ETCD_CONFIG_FILE) is the whole configuration, and the command line and
// every other ETCD_* variable are then ignored; without one, an ETCD_*
// variable fills a flag not given on the command line, and a flag given
// both ways is a refusal (etcd exits: "conflicting environment variable
// is shadowed by corresponding command-line flag", pkg/flags verifyEnv). readConfig reads the config file at a path. It returns the
// effective flags, what etcd ignores, and the config file's path.
func effective(args, env []string, readConfig func(path string) ([]byte, error)) (flags map[string]string, ignored []string, configFile string, err error) {
	fromArgs, err := parseArgs(args)
	if err != nil {
		return nil, nil, "", err
	}
	fromEnv, ignoredEnv := envFlags(env)
	configFile = fromArgs["config-file"]
	if configFile == "" {
		configFile = fromEnv["config-file"]
	}
	if configFile == "" {
		flags = fromArgs
		var both []string
		for k, v := range fromEnv {
			if _, given := flags[k]; given {
				both = append(both, "--"+k+" and ETCD_"+strings.ToUpper(strings.ReplaceAll(k, "-", "_")))
				continue
			}
			flags[k] = v
		}
		if len(both) > 0 {
			sort.Strings(both)
			return nil, nil, "", refusal.New(ErrSource, "the member sets %s: etcd refuses to start with a flag given both ways (\"conflicting environment variable is shadowed by corresponding command-line flag\"); remove one of each", strings.Join(both, ", "))
		}
		return flags, ignoredEnv, "", nil
	}
	if readConfig == nil {
		return nil, nil, "", refusal.New(ErrSource, "the member reads etcd config file %s, which cannot be read from here", configFile)
	}
	b, err := readConfig(configFile)
	if err != nil {
		return nil, nil, "", refusal.New(ErrSource, "read the member's etcd config file: %v", err)
	}
	flags, ignored, err = configFileFlags(b)
	if err != nil {
		return nil, nil, "", err
	}
	for k := range fromArgs {
		if k != "config-file" {
			ignored = append(ignored, "--"+k)
		}
	}
	for k := range fromEnv {
		if k != "config-file" {
			ignored = append(ignored, "ETCD_"+strings.ToUpper(strings.ReplaceAll(k, "-", "_")))
		}
	}
	ignored = append(ignored, ignoredEnv...)
	sort.Strings(ignored)
	return flags, ignored, configFile, nil
}
