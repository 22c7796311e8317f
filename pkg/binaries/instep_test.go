package binaries

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestCompareStores(t *testing.T) {
	sv := func(v, etcd string) StoredVersion {
		return StoredVersion{Version: v, Files: map[string]string{"etcd": etcd, "etcdctl": "ctl-" + etcd}}
	}
	ref := []StoredVersion{sv("3.5.35", "a"), sv("3.6.16", "b"), sv("3.7.3", "c")}
	for _, tc := range []struct {
		name     string
		ref      []StoredVersion
		required []string
		host     []StoredVersion
		want     StoreDiff
	}{
		{name: "in step", ref: ref, required: []string{"3.6.16"}, host: ref},
		{name: "extra versions on the host are fine", ref: ref[:1], host: ref},
		{name: "lacking, in version order", ref: ref, host: []StoredVersion{sv("3.6.16", "b")},
			want: StoreDiff{Lacking: []string{"3.5.35", "3.7.3"}}},
		{name: "another build under the same version", ref: ref, host: []StoredVersion{sv("3.5.35", "a"), sv("3.6.16", "x"), sv("3.7.3", "c")},
			want: StoreDiff{Different: []string{"3.6.16"}}},
		{name: "another etcdctl only", ref: ref[:1], host: []StoredVersion{{Version: "3.5.35", Files: map[string]string{"etcd": "a", "etcdctl": "other"}}},
			want: StoreDiff{Different: []string{"3.5.35"}}},
		{name: "a tool only one side has is no difference", ref: ref[:1], host: []StoredVersion{{Version: "3.5.35", Files: map[string]string{"etcd": "a"}}}},
		{name: "unreadable manifest on the host", ref: ref[:1], host: []StoredVersion{{Version: "3.5.35", Problem: "read manifest: no such file"}},
			want: StoreDiff{Different: []string{"3.5.35"}}},
		{name: "unreadable manifest on the reference is not compared", ref: []StoredVersion{{Version: "3.5.35", Problem: "bad"}}, host: []StoredVersion{sv("3.5.35", "z")}},
		{name: "the spec's version without a reference copy", ref: ref[:1], required: []string{"3.6.16", "3.5.35"}, host: ref[:1],
			want: StoreDiff{Lacking: []string{"3.6.16"}}},
		{name: "empty host", ref: ref, required: []string{"3.6.16"},
			want: StoreDiff{Lacking: []string{"3.5.35", "3.6.16", "3.7.3"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CompareStores(tc.ref, tc.required, tc.host)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if got.InStep() != (len(tc.want.Lacking)+len(tc.want.Different) == 0) {
				t.Errorf("InStep %v for %+v", got.InStep(), got)
			}
		})
	}
}

func TestStored(t *testing.T) {
	dir := t.TempDir()
	s := Open(dir)
	if got, err := s.Stored(); err != nil || len(got) != 0 {
		t.Fatalf("empty store: %v, %v", got, err)
	}
	mk := func(v, manifest string) {
		d := filepath.Join(dir, DirPrefix+v)
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if manifest != "" {
			if err := os.WriteFile(filepath.Join(d, ManifestName), []byte(manifest), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("3.6.16", `{"version":"3.6.16","files":{"etcd":"aa","etcdutl":"bb"}}`)
	mk("3.5.35", "")
	mk("3.7.3", `{"version":"3.7.3","files":{}}`)
	if err := os.MkdirAll(filepath.Join(dir, ".import-x"), 0o700); err != nil {
		t.Fatal(err)
	}
	got, err := s.Stored()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Version != "3.5.35" || got[0].Problem == "" ||
		got[1].Version != "3.6.16" || got[1].Problem != "" || !reflect.DeepEqual(got[1].Files, map[string]string{"etcd": "aa", "etcdutl": "bb"}) ||
		got[2].Version != "3.7.3" || got[2].Problem == "" {
		t.Errorf("Stored: %+v", got)
	}
}

// FuzzCompareStores: a host's listing (GET /v1/binaries, decoded as the
// coordinator does) compared with a fixed reference never panics; every
// version it reports is the reference's or required, each once, in one
// list only, in ascending order; a listing equal to the reference is in
// step.
func FuzzCompareStores(f *testing.F) {
	f.Add([]byte(`[{"version":"3.6.16","files":{"etcd":"b"}}]`))
	f.Add([]byte(`[{"version":"3.5.35","files":{"etcd":"a","etcdctl":"x"}},{"version":"3.5.35","files":null,"problem":"p"}]`))
	f.Add([]byte(`[{"version":"../x","files":{"etcd":""}}]`))
	ref := []StoredVersion{
		{Version: "3.5.35", Files: map[string]string{"etcd": "a", "etcdctl": "c"}},
		{Version: "3.6.16", Files: map[string]string{"etcd": "b"}},
	}
	required := []string{"3.7.3", "3.6.16"}
	f.Fuzz(func(t *testing.T, data []byte) {
		var host []StoredVersion
		if json.Unmarshal(data, &host) != nil {
			return
		}
		d := CompareStores(ref, required, host)
		allowed := map[string]bool{"3.5.35": true, "3.6.16": true, "3.7.3": true}
		seen := map[string]bool{}
		for _, l := range [][]string{d.Lacking, d.Different} {
			for i, v := range l {
				if !allowed[v] || seen[v] {
					t.Fatalf("%+v: %q reported twice or not asked for", d, v)
				}
				seen[v] = true
				if i > 0 && !lessVersion(l[i-1], v) {
					t.Fatalf("%+v: not in ascending order", d)
				}
			}
		}
		if !CompareStores(ref, nil, ref).InStep() {
			t.Fatal("the reference is not in step with itself")
		}
	})
}

// TestReceiveReplacingDamaged: a stored copy of the same etcd that no
// longer verifies is refused by Receive (ErrDamaged) and replaced by
// ReceiveReplacing, the damaged directory kept aside.
func TestReceiveReplacingDamaged(t *testing.T) {
	ctx := t.Context()
	_, bundle := sentStore(t)
	dst := Open(filepath.Join(t.TempDir(), "binaries"))
	if _, _, err := dst.Receive(ctx, testVersion, bytes.NewReader(bundle)); err != nil {
		t.Fatal(err)
	}
	util := filepath.Join(dst.Dir, "etcd-v"+testVersion, "etcdutl")
	if err := os.WriteFile(util, []byte("damaged"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dst.Receive(ctx, testVersion, bytes.NewReader(bundle)); !errors.Is(err, ErrDamaged) {
		t.Fatalf("Receive over a damaged copy: %v, want ErrDamaged", err)
	}
	if _, installed, err := dst.ReceiveReplacing(ctx, testVersion, bytes.NewReader(bundle)); err != nil || !installed {
		t.Fatalf("ReceiveReplacing over a damaged copy: installed %v, %v", installed, err)
	}
	if res, err := dst.Verify(ctx, testVersion); err != nil || !res.OK {
		t.Fatalf("Verify after the replacement = %+v, %v", res, err)
	}
	aside, _ := filepath.Glob(filepath.Join(dst.Dir, "etcd-v"+testVersion+".replaced-*"))
	if len(aside) != 1 {
		t.Fatalf("kept aside: %v, want the damaged copy", aside)
	}
	if b, err := os.ReadFile(filepath.Join(aside[0], "etcdutl")); err != nil || string(b) != "damaged" {
		t.Errorf("the copy aside: %q, %v", b, err)
	}
}
