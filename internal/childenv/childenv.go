// Package childenv builds the environment of every process Steward starts
// (the agent, etcd members, etcd tools, the snapshot checker) from a short
// list of names instead of passing on the caller's whole environment.
//
// Passing everything on leaked secrets (AWS_SECRET_ACCESS_KEY) into every
// etcd process and let ETCD_* variables, which etcd reads as flags, change
// how members run behind the spec's back.
package childenv

import (
	"os"
	"slices"
	"strings"
)

// base are the variables every child keeps: where to find programs and
// files, time zone and locale, and Go runtime knobs (the race detector's
// settings of a race-built Steward, coverage, resource limits).
var base = []string{
	"PATH", "HOME", "TMPDIR", "TZ", "LANG", "LC_ALL",
	"GOMAXPROCS", "GOMEMLIMIT", "GOTRACEBACK", "GORACE", "GOCOVERDIR",
}

// agentOnly are what the agent keeps besides base: how it reaches an S3
// store (system CA bundle, proxies) and Steward's test crash points.
var agentOnly = []string{
	"SSL_CERT_FILE", "SSL_CERT_DIR",
	"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy",
	"STEWARD_CRASHPOINT",
}

// Etcd is the environment of an etcd member or an etcd tool (etcd
// --version, etcdutl): base only, never an ETCD_* variable.
func Etcd() []string { return pick(base) }

// Agent is the environment of the agent this process starts: base, what
// reaches an S3 store, and the variables named in pass (the S3 credentials
// when the spec gives no credentials file, the one secret the agent takes
// from the environment).
func Agent(pass ...string) []string {
	return pick(slices.Concat(base, agentOnly, pass))
}

// With is Etcd plus the KEY=VALUE pairs given.
func With(kv ...string) []string { return append(Etcd(), kv...) }

func pick(names []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		if v, ok := os.LookupEnv(n); ok {
			out = append(out, n+"="+v)
		}
	}
	return out
}

// OfEtcd keeps of another process' environment (KEY=VALUE entries) what
// an etcd member reads: its ETCD_* variables and the base names. Steward
// records it to restart a member it gives back (`steward adopt --undo`),
// and records nothing else it may hold (a secret the member never read).
func OfEtcd(env []string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "ETCD_") || slices.Contains(base, name) {
			out = append(out, kv)
		}
	}
	return out
}
