package adopt

import (
	"errors"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/refusal"
)

// Discovery reads files and processes Steward did not write: a manifest,
// a unit, a command line and environment, an etcd config file. These fuzz
// targets feed each parser arbitrary input; it must not panic, and a
// refusal must be a *refusal.Refusal (one clear error, no Go trace).

// refusalOrRun checks what a parser returned.
func refusalOrRun(t *testing.T, r MemberRun, err error) {
	t.Helper()
	if err != nil {
		var ref *refusal.Refusal
		if !errors.As(err, &ref) {
			t.Fatalf("error %v (%T) is not a refusal", err, err)
		}
		return
	}
	// An accepted run can be checked, compared and turned into a config.
	_ = Check(r)
	_ = Differences(r, []string{"--name=" + r.Name})
	_, _ = r.MemberConfig()
}

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(kubeadmManifest))
	f.Add([]byte("kind: Pod\nspec:\n  containers:\n  - name: etcd\n    args: [--name=a, --config-file=/c]\n"))
	f.Add([]byte("kind: Pod\nspec: {containers: [{name: x, command: [/usr/bin/etcd, -data-dir, d]}]}\n"))
	conf := files(map[string]string{"/c": "name: b\npeer-transport-security: {allowed-cn: [x]}\n"})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseManifest(b, "m.yaml", conf)
		refusalOrRun(t, r, err)
	})
}

func FuzzParseUnit(f *testing.F) {
	f.Add([]byte("[Service]\nEnvironmentFile=-/e\nEnvironment=\"A=--name=x\" ETCD_DATA_DIR=/d\nExecStart=/usr/bin/etcd $A \\\n  --listen-peer-urls '${B}'\n"))
	f.Add([]byte("[Service]\nExecStart=etcd --config-file=/c\n"))
	f.Add([]byte("[Service]\nExecStart=etcd \"unclosed\n"))
	fs := files(map[string]string{"/e": "B=http://x:2380\n# c\n", "/c": "name: c\n"})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseUnit(b, "etcd.service", fs)
		refusalOrRun(t, r, err)
	})
}

// FuzzParseProcess: a NUL-separated command line and environment, as
// /proc/PID/cmdline and environ hold them, and a config file it may name.
func FuzzParseProcess(f *testing.F) {
	f.Add("etcd\x00--name=a\x00--data-dir\x00/d", "ETCD_SNAPSHOT_COUNT=5\x00PATH=/bin", "")
	f.Add("etcd\x00--config-file=c.yaml", "ETCD_NAME=x", "name: a\nclient-transport-security:\n  cert-file: /s.crt\n  client-cert-auth: true\nlisten-client-urls: [http://a:1, http://b:2]\n")
	f.Add("/usr/bin/etcd\x00-client-cert-auth\x00--", "ETCD_CONFIG_FILE=c.yaml", "peer-transport-security: 7\n")
	f.Fuzz(func(t *testing.T, cmdline, environ, config string) {
		args := strings.Split(cmdline, "\x00")
		r, err := ParseProcess(args, strings.Split(environ, "\x00"), "/run", 1, files(map[string]string{"/run/c.yaml": config}))
		refusalOrRun(t, r, err)
	})
}
