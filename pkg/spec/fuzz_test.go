package spec

import (
	"bytes"
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

// FuzzParseValidate reads arbitrary cluster specs (cluster.yaml is edited
// by hand) and validates them, with host names resolved without DNS.
// Properties: Parse and Validate never panic; a spec that validates
// survives Save and Load (the file written and read back is the same
// spec, it validates again with the same warnings, and saving it again
// writes the same bytes), and Clone copies it exactly.
func FuzzParseValidate(f *testing.F) {
	for _, c := range fuzzSeedSpecs(f) {
		b, err := yaml.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("name: x\nmembers: [{name: a}]\nagents: [{name: local}]\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		c, err := Parse(doc)
		if err != nil {
			return
		}
		opts := ValidateOptions{
			Resolve: resolveFake,
			KnownVersion: func(v string) error {
				if v == "3.6.16" || v == "3.5.35" {
					return nil
				}
				return errors.New("not in the store")
			},
		}
		warns, err := c.Validate(opts)
		if err != nil {
			return
		}
		if !reflect.DeepEqual(c.Clone(), c) {
			t.Fatalf("Clone differs from the spec")
		}
		dir := t.TempDir()
		p := filepath.Join(dir, FileName)
		if err := c.Save(p); err != nil {
			t.Fatalf("save a valid spec: %v", err)
		}
		back, err := Load(p)
		if err != nil {
			t.Fatalf("a valid spec, saved, does not load: %v", err)
		}
		warns2, err := back.Validate(opts)
		if err != nil || !reflect.DeepEqual(warns, warns2) {
			t.Fatalf("a valid spec, saved and loaded, validates differently: %v %v (was %v)", err, warns2, warns)
		}
		a, _ := yaml.Marshal(c)
		b, _ := yaml.Marshal(back)
		if !bytes.Equal(a, b) {
			t.Fatalf("save and load changed the spec:\n%s\n%s", a, b)
		}
	})
}

// fuzzSeedSpecs are real specs: what `steward up` writes for one and three
// members (TLS on and off), what `steward init` writes for three hosts
// with S3 backups, and a spec that joined a member.
func fuzzSeedSpecs(tb testing.TB) []*Cluster {
	tb.Helper()
	var out []*Cluster
	for _, o := range []DefaultOptions{
		{Members: 1, Version: "3.6.16", StewardDir: "/s", FreePort: counter()},
		{Members: 3, Version: "3.5.35", StewardDir: "/s", FreePort: counter()},
		{Members: 3, Version: "3.6.16", StewardDir: "/s", TLSOff: true, FreePort: counter()},
	} {
		c, err := NewDefault(o)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, c)
	}
	c, err := NewMultiHost(HostsOptions{Version: "3.6.16", Hosts: []Host{{"cp-1", "10.0.0.11"}, {"cp-2", "localhost"}, {"cp-3", "10.0.0.13"}}})
	if err != nil {
		tb.Fatal(err)
	}
	c.Backup.S3 = &S3{Endpoint: "http://10.0.0.1:9000", Bucket: "b", Prefix: "c1/"}
	c.Backup.Continuous = true
	c.Backup.FullSchedule = "*/5 * * * *"
	c.Recovery = Recovery{GracePeriodSeconds: 60}
	c.Etcd.ExtraFlags = map[string]string{"max-request-bytes": "2097152"}
	out = append(out, c)
	j := out[1].Clone()
	j.Members[2].Bootstrap = &Bootstrap{InitialCluster: j.InitialCluster()}
	out = append(out, j)
	return out
}

// TestFuzzSeedSpecsValidate: the fuzz seeds are valid specs, so the fuzz
// target's round trip runs on them.
func TestFuzzSeedSpecsValidate(t *testing.T) {
	for i, c := range fuzzSeedSpecs(t) {
		if _, err := c.Validate(ValidateOptions{Resolve: resolveFake}); err != nil {
			t.Errorf("seed %d: %v", i, err)
		}
	}
}
