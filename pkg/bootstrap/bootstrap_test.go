package bootstrap

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/spec"
)

// TestUpRefusesNewClusterOptions: an option that shapes a new spec and
// contradicts the existing one is refused with an *OptionError naming the
// field (the command names its flag), before anything starts.
func TestUpRefusesNewClusterOptions(t *testing.T) {
	dir := t.TempDir()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 3, Version: "3.6.16", StewardDir: dir, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(filepath.Join(dir, spec.FileName)); err != nil {
		t.Fatal(err)
	}
	for option, o := range map[string]UpOptions{
		"Members":     {Members: 5},
		"Version":     {Version: "3.5.35"},
		"TLSOff":      {TLSOff: true},
		"BinaryStore": {BinaryStore: filepath.Join(dir, "elsewhere")},
	} {
		_, _, err := Up(context.Background(), dir, o, nil)
		oe, ok := errors.AsType[*OptionError](err)
		if !ok || oe.Option != option || !errors.Is(err, ErrNewClusterOnly) {
			t.Errorf("%s: %v, want an *OptionError for %s", option, err, option)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "applies only to a new cluster") || strings.Contains(msg, "--") {
			t.Errorf("%s: %q", option, msg)
		}
	}
}
