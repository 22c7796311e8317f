package localkube

import (
	"strings"
	"testing"
)

func TestParseManifestTags(t *testing.T) {
	tags, err := parseManifestTags([]byte(`[{"Config":"c.json","RepoTags":["registry.k8s.io/pause:3.10"],"Layers":["l.tar"]}]`))
	if err != nil || len(tags) != 1 || tags[0] != "registry.k8s.io/pause:3.10" {
		t.Errorf("tags %v, %v", tags, err)
	}
	for in, want := range map[string]string{
		`[]`:                  "names no image",
		`{`:                   "manifest.json",
		`[{"RepoTags":[""]}]`: "image tag",
	} {
		if _, err := parseManifestTags([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
}

// FuzzParseManifestTags: a manifest.json read from an image tarball never
// panics the parser, and what it returns are tags without blanks.
func FuzzParseManifestTags(f *testing.F) {
	f.Add([]byte(`[{"Config":"c.json","RepoTags":["registry.k8s.io/pause:3.10"],"Layers":["l.tar"]}]`))
	f.Add([]byte(`[{"RepoTags":["a:b","c:d"]},{"RepoTags":null}]`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tags, err := parseManifestTags(b)
		if err != nil {
			return
		}
		if len(tags) == 0 {
			t.Fatal("no tags and no error")
		}
		for _, tag := range tags {
			if tag == "" || strings.ContainsAny(tag, " \t\n") {
				t.Fatalf("tag %q", tag)
			}
		}
	})
}

func TestOwnerOf(t *testing.T) {
	for name, want := range map[string]int{
		"lk123b1": 123, "lk123v1-2": 123, "lk123n1-node-a": 123, "lk123c1-node-a": 123, "lk123c2-infra": 123,
		"stw123b1": 0, "lk": 0, "lkb": 0, "lk12x": 0, "eth0": 0, "lk123b": 0, "lk123-node-a": 0,
	} {
		if got := ownerOf(name); got != want {
			t.Errorf("ownerOf(%q) = %d, want %d", name, got, want)
		}
	}
}
