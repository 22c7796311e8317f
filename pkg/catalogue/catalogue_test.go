package catalogue

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestDefaultCatalogue(t *testing.T) {
	c := Default()
	for _, m := range []string{"3.5", "3.6", "3.7"} {
		if _, ok := c.Minor(m); !ok {
			t.Errorf("embedded catalogue lacks %s", m)
		}
	}
	e, _ := c.Minor("3.6")
	if e.MinimumFrom["3.5"] != "3.5.26" || !e.OnlineDowngrade {
		t.Errorf("3.6 entry: minimumFrom %v online %v", e.MinimumFrom, e.OnlineDowngrade)
	}
}

func TestPath(t *testing.T) {
	c := Default()
	hop := func(k HopKind, from, to string) Hop { return Hop{Kind: k, From: from, To: to} }
	for _, tc := range []struct {
		from, to string
		want     []Hop
	}{
		{"3.6.16", "3.6.16", nil},
		{"3.6.12", "3.6.16", []Hop{hop(Patch, "3.6.12", "3.6.16")}},
		{"3.6.16", "3.6.12", []Hop{hop(Patch, "3.6.16", "3.6.12")}},
		{"3.5.35", "3.6.16", []Hop{hop(Upgrade, "3.5.35", "3.6.16")}},
		{"3.5.35", "3.7.3", []Hop{hop(Upgrade, "3.5.35", "3.6.16"), hop(Upgrade, "3.6.16", "3.7.3")}},
		// Below 3.6's minimum: patch first.
		{"3.5.10", "3.6.16", []Hop{
			{Kind: Patch, From: "3.5.10", To: "3.5.35", Reason: "etcd 3.6 requires 3.5 3.5.26 or later before the upgrade"},
			hop(Upgrade, "3.5.35", "3.6.16")}},
		// At the minimum exactly: no patch hop.
		{"3.5.26", "3.6.0", []Hop{hop(Upgrade, "3.5.26", "3.6.0")}},
		// An old intermediate patch is never used: the latest is.
		{"3.6.0", "3.7.3", []Hop{
			{Kind: Patch, From: "3.6.0", To: "3.6.16", Reason: "etcd 3.7 requires 3.6 3.6.11 or later before the upgrade"},
			hop(Upgrade, "3.6.16", "3.7.3")}},
		{"3.7.3", "3.5.35", []Hop{
			{Kind: Downgrade, From: "3.7.3", To: "3.6.16", Online: true},
			{Kind: Downgrade, From: "3.6.16", To: "3.5.35", Online: true}}},
		{"3.5.35", "3.4.30", []Hop{{Kind: Downgrade, From: "3.5.35", To: "3.4.30", Online: false}}},
	} {
		got, err := c.Path(tc.from, tc.to)
		if err != nil {
			t.Errorf("%s -> %s: %v", tc.from, tc.to, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s -> %s:\n got %+v\nwant %+v", tc.from, tc.to, got, tc.want)
		}
	}
}

func TestPathRefusals(t *testing.T) {
	c := Default()
	for _, tc := range []struct{ from, to, want string }{
		{"3.5.35", "3.8.0", "etcd 3.8 is not in the version catalogue"},
		{"3.5.35", "4.0.0", "changes the major version"},
		{"3.6.16", "3.7.0-rc.0", "pre-release"},
		{"3.5.35", "3.3.0", "etcd 3.4 is not in the version catalogue"},
		{"3.6.16", "three", "target version"},
	} {
		_, err := c.Path(tc.from, tc.to)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s -> %s: error %v, want it to mention %q", tc.from, tc.to, err, tc.want)
		}
	}
}

func TestOverrideFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, FileName)
	// No file: the embedded catalogue.
	c, err := Load(p)
	if err != nil || c.Minors[len(c.Minors)-1].Minor != "3.7" {
		t.Fatalf("Load without a file: %v", err)
	}
	// A file adds 3.8 with no code change.
	extra := string(embedded) + `
- minor: "3.8"
  latest: 3.8.1
  upgradeFrom: ["3.7"]
  minimumFrom: {"3.7": "3.7.2"}
  downgradeTo: ["3.7"]
  onlineDowngrade: true
`
	if err := os.WriteFile(p, []byte(extra), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = Load(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Path("3.6.16", "3.8.1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].To != "3.8.1" || got[0].To != "3.7.3" {
		t.Fatalf("path through an overridden catalogue: %+v", got)
	}
	for _, bad := range []struct{ body, want string }{
		{"kind: Nope\n", "want VersionCatalogue"},
		{"kind: VersionCatalogue\nminors:\n- minor: \"3.6\"\n  latest: 3.7.0\n", "not a 3.6.x version"},
		{"kind: VersionCatalogue\nminors:\n- minor: \"3.6\"\n  latest: 3.6.1\n  minimumFrom: {\"3.5\": \"3.5.1\"}\n", "line in upgradeFrom"},
		{"kind: VersionCatalogue\nminors:\n- minor: \"3.6\"\n  latset: 3.6.1\n", "unknown field"},
	} {
		if err := os.WriteFile(p, []byte(bad.body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(p); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("bad catalogue %q: error %v, want %q", bad.body, err, bad.want)
		}
	}
}

func TestFlags(t *testing.T) {
	c := Default()
	for _, tc := range []struct {
		version string
		in      map[string]string
		want    map[string]string
	}{
		// Old spelling on 3.6 and 3.7: the new name.
		{"3.6.16", map[string]string{"experimental-max-learners": "2"}, map[string]string{"max-learners": "2"}},
		{"3.7.3", map[string]string{"experimental-max-learners": "2"}, map[string]string{"max-learners": "2"}},
		// New spelling on 3.5: the old name.
		{"3.5.35", map[string]string{"max-learners": "2"}, map[string]string{"experimental-max-learners": "2"}},
		// Experimental flags that became feature gates, and back.
		{"3.7.3", map[string]string{"experimental-stop-grpc-service-on-defrag": "true", "feature-gates": "InitialCorruptCheck=true"},
			map[string]string{"feature-gates": "InitialCorruptCheck=true,StopGRPCServiceOnDefrag=true"}},
		{"3.5.35", map[string]string{"feature-gates": "StopGRPCServiceOnDefrag=true"},
			map[string]string{"experimental-stop-grpc-service-on-defrag": "true"}},
		// Flags nobody renamed pass through.
		{"3.5.35", map[string]string{"max-txn-ops": "256"}, map[string]string{"max-txn-ops": "256"}},
	} {
		got, err := c.Flags(tc.version, tc.in)
		if err != nil {
			t.Errorf("%s %v: %v", tc.version, tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s %v: got %v want %v", tc.version, tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		version string
		in      map[string]string
		want    string
	}{
		{"3.7.3", map[string]string{"enable-v2": "true"}, "does not accept --enable-v2 (removed in 3.7)"},
		{"3.5.35", map[string]string{"feature-gates": "SomethingNew=true"}, "has no --feature-gates"},
		{"3.6.16", map[string]string{"max-learners": "1", "experimental-max-learners": "2"}, "set both"},
	} {
		if _, err := c.Flags(tc.version, tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: error %v, want %q", tc.version, tc.in, err, tc.want)
		}
	}
}
