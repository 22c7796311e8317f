package catalogue

import (
	"bytes"
	"testing"

	"github.com/coreos/go-semver/semver"
	"sigs.k8s.io/yaml"
)

// FuzzParse reads arbitrary version catalogues (an operator's override
// file) and plans paths over what it accepts. Properties: a catalogue
// Parse accepts survives a YAML round trip (writing it back and parsing
// that gives the same document), and every path between two of its
// versions keeps Path's invariant: the hops chain from the first version
// to the second, each changes the minor line by at most one, and no
// upgrade leaves a line from a patch below the next line's minimum.
// Flags never panics on it.
func FuzzParse(f *testing.F) {
	f.Add(embedded, "3.5.10", "3.7.3")
	f.Add(embedded, "3.7.3", "3.5.35")
	f.Add([]byte("kind: VersionCatalogue\nminors:\n- minor: \"3.1\"\n  latest: 3.1.4\n- minor: \"3.2\"\n  latest: 3.2.9\n  upgradeFrom: [\"3.1\"]\n  minimumFrom: {\"3.1\": 3.1.2}\n  downgradeTo: [\"3.1\"]\n  renamedFlags: {a: b}\n  removedFlags: [c]\n"), "3.1.0", "3.2.9")
	f.Fuzz(func(t *testing.T, doc []byte, from, to string) {
		c, err := Parse(doc)
		if err != nil {
			return
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("marshal an accepted catalogue: %v", err)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("an accepted catalogue, written back, is refused: %v\n%s", err, out)
		}
		if again, _ := yaml.Marshal(back); !bytes.Equal(again, out) {
			t.Fatalf("round trip changed the catalogue:\n%s\n%s", out, again)
		}
		versions := []string{from, to}
		for _, m := range c.Minors {
			versions = append(versions, m.Latest)
			for _, v := range m.MinimumFrom {
				versions = append(versions, v)
			}
		}
		if len(versions) > 12 {
			versions = versions[:12]
		}
		for _, a := range versions {
			for _, b := range versions {
				checkPath(t, c, a, b)
			}
			_, _ = c.Flags(a, map[string]string{"--snapshot-count": "1", "feature-gates": "A=true,B=false", "experimental-x": "y"})
		}
	})
}

// checkPath plans from a to b and checks the hops' invariant.
func checkPath(t *testing.T, c *Catalogue, a, b string) {
	hops, err := c.Path(a, b)
	if err != nil || len(hops) == 0 {
		return
	}
	cur := semver.New(a)
	for i, h := range hops {
		hf, ht := semver.New(h.From), semver.New(h.To)
		if !hf.Equal(*cur) {
			t.Fatalf("%s -> %s: hop %d starts at %s, not at %s: %+v", a, b, i, h.From, cur, hops)
		}
		if d := ht.Minor - hf.Minor; d > 1 || d < -1 || ht.Major != hf.Major {
			t.Fatalf("%s -> %s: hop %d %s -> %s skips a minor line", a, b, i, h.From, h.To)
		}
		if h.Kind == Upgrade {
			e, _ := c.Minor(MinorOf(ht))
			if min, ok := e.MinimumFrom[MinorOf(hf)]; ok && hf.LessThan(*semver.New(min)) {
				t.Fatalf("%s -> %s: hop %d leaves %s below the minimum %s", a, b, i, h.From, min)
			}
		}
		cur = ht
	}
	if !cur.Equal(*semver.New(b)) {
		t.Fatalf("%s -> %s: the hops end at %s", a, b, cur)
	}
}
