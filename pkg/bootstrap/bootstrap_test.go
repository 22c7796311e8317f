package bootstrap

import (
	"context"
	"errors"
	"os"
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
		"Address":     {Address: "127.0.0.2"},
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

// TestUpRefusesBadAddress: an address members could not listen on is
// refused with ErrAddress before the Steward directory gets a spec.
func TestUpRefusesBadAddress(t *testing.T) {
	for _, a := range []string{"localhost", "http://127.0.0.2", "0.0.0.0", "::", "224.0.0.1", "192.0.2.7", "127.0.0.2:2379"} {
		dir := t.TempDir()
		_, _, err := Up(context.Background(), dir, UpOptions{Address: a}, nil)
		if !errors.Is(err, ErrAddress) || !strings.Contains(err.Error(), a) {
			t.Errorf("address %q: %v, want ErrAddress naming it", a, err)
		}
		if _, err := os.Stat(filepath.Join(dir, spec.FileName)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("address %q: a spec was written (%v)", a, err)
		}
	}
}

// TestLocalAddress: a new local member listens where the local members
// do; a spec without one uses the default.
func TestLocalAddress(t *testing.T) {
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 1, Version: "3.6.16", StewardDir: t.TempDir(), Host: "127.0.0.3", FreePort: spec.FreePort("127.0.0.3")})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.LocalAddress(); got != "127.0.0.3" {
		t.Errorf("LocalAddress = %q, want 127.0.0.3", got)
	}
	s.Members = nil
	if got := s.LocalAddress(); got != spec.DefaultHost {
		t.Errorf("LocalAddress without members = %q, want %s", got, spec.DefaultHost)
	}
}
