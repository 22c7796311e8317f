package childenv

import (
	"slices"
	"strings"
	"testing"
)

func TestEnvironments(t *testing.T) {
	t.Setenv("PATH", "/usr/bin:/bin")
	t.Setenv("TZ", "UTC")
	t.Setenv("ETCD_NAME", "hijacked")
	t.Setenv("ETCD_QUOTA_BACKEND_BYTES", "1")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
	t.Setenv("AWS_ACCESS_KEY_ID", "ak")
	t.Setenv("SSL_CERT_FILE", "/ca.pem")
	t.Setenv("STEWARD_CRASHPOINT", "x")

	tests := []struct {
		name       string
		env        []string
		want, deny []string
	}{
		{name: "etcd", env: Etcd(), want: []string{"PATH=/usr/bin:/bin", "TZ=UTC"},
			deny: []string{"ETCD_", "AWS_", "SSL_CERT_FILE", "STEWARD_CRASHPOINT"}},
		{name: "with", env: With("A=b"), want: []string{"PATH=/usr/bin:/bin", "A=b"}, deny: []string{"ETCD_", "AWS_"}},
		{name: "agent", env: Agent(), want: []string{"PATH=/usr/bin:/bin", "SSL_CERT_FILE=/ca.pem", "STEWARD_CRASHPOINT=x"},
			deny: []string{"ETCD_", "AWS_"}},
		{name: "agent with S3 credentials", env: Agent("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
			want: []string{"AWS_ACCESS_KEY_ID=ak", "AWS_SECRET_ACCESS_KEY=s3cr3t"}, deny: []string{"ETCD_"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, w := range tt.want {
				if !slices.Contains(tt.env, w) {
					t.Errorf("%s lacks %s: %q", tt.name, w, tt.env)
				}
			}
			for _, kv := range tt.env {
				for _, d := range tt.deny {
					if strings.HasPrefix(kv, d) {
						t.Errorf("%s passes %s on", tt.name, kv)
					}
				}
			}
		})
	}
}

// TestOfEtcd: of another process' environment, only what etcd reads is
// kept (ETCD_* and the base names), never another variable.
func TestOfEtcd(t *testing.T) {
	got := OfEtcd([]string{"PATH=/bin", "ETCD_SNAPSHOT_COUNT=5000", "AWS_SECRET_ACCESS_KEY=s3cr3t", "ETCDCTL_API=3", "GOMAXPROCS=2", "NOEQUALS"})
	want := []string{"PATH=/bin", "ETCD_SNAPSHOT_COUNT=5000", "GOMAXPROCS=2"}
	if !slices.Equal(got, want) {
		t.Errorf("OfEtcd = %q, want %q", got, want)
	}
}
