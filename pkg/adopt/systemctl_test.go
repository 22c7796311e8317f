package adopt

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestParseShow: `systemctl show --property=...` output, unknown and
// malformed lines ignored, values with '=' kept whole.
func TestParseShow(t *testing.T) {
	out := "LoadState=loaded\nActiveState=active\nUnitFileState=enabled-runtime\nFragmentPath=/etc/systemd/system/etcd.service\nOther=x=y\nnoise\n"
	got := parseShow(out)
	want := UnitState{LoadState: "loaded", ActiveState: "active", UnitFileState: "enabled-runtime", FragmentPath: "/etc/systemd/system/etcd.service"}
	if got != want {
		t.Errorf("parseShow = %+v, want %+v", got, want)
	}
	if got := parseShow("FragmentPath=/a=b.service\n"); got.FragmentPath != "/a=b.service" {
		t.Errorf("a value with '=': %q", got.FragmentPath)
	}
}

// TestUnitCommand: adopt disables and undo enables a unit only the way it
// was enabled; a static, linked or disabled unit's enablement is left alone.
func TestUnitCommand(t *testing.T) {
	for _, tc := range []struct {
		state         string
		enable, disab []string
	}{
		{"enabled", []string{"enable", "etcd.service"}, []string{"disable", "etcd.service"}},
		{"enabled-runtime", []string{"enable", "--runtime", "etcd.service"}, []string{"disable", "--runtime", "etcd.service"}},
		{"disabled", nil, nil},
		{"static", nil, nil},
		{"linked", nil, nil},
		{"", nil, nil},
	} {
		if got := unitCommand(true, "etcd.service", tc.state); !slices.Equal(got, tc.enable) {
			t.Errorf("%q: enable %q, want %q", tc.state, got, tc.enable)
		}
		if got := unitCommand(false, "etcd.service", tc.state); !slices.Equal(got, tc.disab) {
			t.Errorf("%q: disable %q, want %q", tc.state, got, tc.disab)
		}
	}
}

// TestSamePath: systemd reports a linked unit's file; the path given may
// be a link to it.
func TestSamePath(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "etcd.service")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.service")
	if err := os.Symlink(f, link); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.service")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{f, f, true}, {link, f, true}, {f + "/", f, true}, {f, other, false}, {"", f, false}, {"/nope/etcd.service", "/nope/etcd.service", true},
	} {
		if got := samePath(tc.a, tc.b); got != tc.want {
			t.Errorf("samePath(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}
