package restore

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestOpenFileRefusesStoreOptions: options that choose or read backups in
// the store are refused with a snapshot file, all named in one error.
func TestOpenFileRefusesStoreOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string // "" accepted
	}{
		{"file alone", Options{}, ""},
		{"latest is the default", Options{Backup: "latest", Force: true, BumpRevision: 5}, ""},
		{"a backup ID", Options{Backup: "20261124T000000Z"}, "a backup ID"},
		{"a revision", Options{ToRevision: 5}, "a target revision"},
		{"a time", Options{ToTime: time.Now()}, "a target time"},
		{"a key file", Options{KeyFile: "k"}, "a key file"},
		{"two at once", Options{AllowUnauthenticated: true, SkipUntrusted: true}, "trusting unauthenticated manifests, skipping untrusted manifests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.FromSnapshot = "/tmp/x.snapshot"
			_, err := openFile(nil, tc.o)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("openFile = %v; want it accepted", err)
				}
				return
			}
			if !errors.Is(err, ErrSourceConflict) {
				t.Fatalf("openFile = %v; want ErrSourceConflict", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || !strings.Contains(msg, "/tmp/x.snapshot") || strings.Contains(msg, "--") {
				t.Errorf("openFile error %q: want it to name %q and the file, and no flag", msg, tc.want)
			}
		})
	}
}
