package localkube

import (
	"slices"
	"strings"
	"testing"
)

// TestS3CommandKeepsSecretOffCommandLine: versitygw's secret is in its
// environment, not in its arguments (readable by anyone in /proc).
func TestS3CommandKeepsSecretOffCommandLine(t *testing.T) {
	argv, env := s3Command("/bin/versitygw", "10.0.0.1:9000", "/d/s3/root", "localkube", "s3cr3t")
	if strings.Contains(strings.Join(argv, " "), "s3cr3t") {
		t.Errorf("secret on the command line: %q", argv)
	}
	for _, kv := range []string{"ROOT_ACCESS_KEY_ID=localkube", "ROOT_SECRET_ACCESS_KEY=s3cr3t"} {
		if !slices.Contains(env, kv) {
			t.Errorf("environment lacks %s: %q", kv, env)
		}
	}
}
