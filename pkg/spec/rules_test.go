package spec

import (
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	for _, ok := range []string{"a", "etcd-1", "0", strings.Repeat("a", 63)} {
		if err := ValidName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "..", "../../x", "a/b", ".a", "-a", "a-", "A", "a_b", "a.json", strings.Repeat("a", 64), "a\x00"} {
		if err := ValidName(bad); err == nil || !strings.Contains(err.Error(), "lower-case letters") {
			t.Errorf("%q accepted (%v)", bad, err)
		}
	}
}

// TestCheckExtraFlag: every flag that decides the members' TLS, where their
// data goes or which cluster they join is refused, with or without dashes
// and in both spellings of a flag etcd 3.6 renamed; a key that is not a
// flag name (one that would smuggle a value in) is refused too.
func TestCheckExtraFlag(t *testing.T) {
	for key, want := range map[string]string{
		"data-dir":                     "set by Steward from the spec",
		"--data-dir":                   "set by Steward from the spec",
		"-name":                        "set by Steward from the spec",
		"snapshot-count":               "set by Steward from the spec",
		"--wal-dir":                    "where a member keeps its data",
		"config-file":                  "where a member keeps its data",
		"force-new-cluster":            "where a member keeps its data",
		"listen-client-http-urls":      "listens",
		"discovery":                    "finds its cluster",
		"discovery-srv":                "finds its cluster",
		"--discovery-token":            "finds its cluster",
		"peer-cert-allowed-cn":         "TLS",
		"peer-cert-allowed-hostname":   "TLS",
		"client-cert-allowed-hostname": "TLS",
		"auto-tls":                     "TLS",
		"--peer-auto-tls":              "TLS",
		"self-signed-cert-validity":    "TLS",
		"client-crl-file":              "TLS",
		"peer-crl-file":                "TLS",
		"peer-client-cert-auth":        "TLS",
		"cipher-suites":                "TLS",
		"tls-min-version":              "TLS",
		// etcd 3.5 spelling and 3.6+ spelling.
		"experimental-peer-skip-client-san-verification":   "TLS",
		"--experimental-peer-skip-client-san-verification": "TLS",
		"peer-skip-client-san-verification":                "TLS",
		"experimental-wal-dir":                             "where a member keeps its data",
		"unsafe-no-fsync":                                  "fsync",
		// Not flag names: "--data-dir=x=/y" would set --data-dir.
		"data-dir=x": "not an etcd flag name",
		"Data-Dir":   "not an etcd flag name",
		"data dir":   "not an etcd flag name",
		"":           "not an etcd flag name",
		"--":         "not an etcd flag name",
		"a--b":       "not an etcd flag name",
	} {
		err := CheckExtraFlag(key)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `"`+key+`"`) {
			t.Errorf("CheckExtraFlag(%q) = %v, want an error naming it and containing %q", key, err, want)
		}
	}
	for _, ok := range []string{"max-txn-ops", "--log-level", "feature-gates", "experimental-snapshot-catchup-entries",
		"snapshot-catchup-entries", "listen-metrics-urls", "enable-v2", "auth-token"} {
		if err := CheckExtraFlag(ok); err != nil {
			t.Errorf("CheckExtraFlag(%q): %v", ok, err)
		}
	}
}
