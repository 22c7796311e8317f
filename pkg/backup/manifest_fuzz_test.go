package backup

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParseManifest reads a manifest as it comes out of a backup store.
// Properties, beyond never panicking:
//   - a manifest ParseManifest accepts without error has the content of a
//     manifest the key sealed (the seeds'): nothing the fuzzer writes
//     forges a MAC, whatever its JSON spelling;
//   - whatever it returns without error, or as merely unauthenticated or
//     under another key, agrees with itself (checkManifest), so callers
//     that trust it deliberately never see an object name its ID does not
//     give;
//   - an error is one of the package's manifest errors.
func FuzzParseManifest(f *testing.F) {
	k := testAuthKey(7)
	sealed := func(kind string, start, end int64, encrypted bool) Manifest {
		m := Manifest{
			Kind: kind, ClusterID: "cdf818194e3a8c32", Member: "etcd-1",
			StartRevision: start, EndRevision: end, EtcdVersion: "3.6.16", Size: 1234, RawSize: 5678,
			SHA256: strings.Repeat("0f", 32), Compression: "zstd",
			CreatedAt: time.Date(2026, 11, 24, 9, 0, 0, 123000000, time.UTC),
		}
		if kind == KindFull {
			m.ID = NewID(KindFull, m.CreatedAt, end)
		} else {
			m.ID = m.CreatedAt.UTC().Format("20060102T150405.000Z") + "-delta-r" + strconv.FormatInt(start, 10) + "-" + strconv.FormatInt(end, 10)
			m.TotalKeys = int(end - start + 1)
		}
		if encrypted {
			m.Encryption, m.KeyID = encAlgorithm, "00112233445566ff"
		}
		m.Object = ObjectName(m.Kind, m.ID, encrypted)
		k.Seal(&m)
		return m
	}
	valid := map[string]bool{}
	for _, m := range []Manifest{
		sealed(KindFull, 1, 42, false),
		sealed(KindFull, 10, 99, true),
		sealed(KindDelta, 43, 60, false),
		sealed(KindDelta, 61, 61, true),
		onTimeline(sealed(KindFull, 2000000001, 2000000001, false), Lineage{Timeline: 3, ParentTimeline: 1, BranchRevision: 60}, k),
		onTimeline(sealed(KindDelta, 2000000002, 2000000009, true), Lineage{Timeline: 4}, k),
	} {
		valid[string(canonicalManifest(&m).bytes())] = true
		b, err := json.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		ind, _ := json.MarshalIndent(m, "", "  ")
		f.Add(ind)
		// The same manifest unauthenticated, as written before the key.
		u := m
		u.Format, u.MACKeyID, u.MAC = 0, "", ""
		b, _ = json.Marshal(u)
		f.Add(b)
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"id":"x","kind":"full","object":"../../etc/passwd"}`))
	f.Add([]byte(`{"timeline":2,"parentTimeline":5,"branchRevision":-1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b, k)
		switch {
		case err == nil:
			if !valid[string(canonicalManifest(&m).bytes())] {
				t.Fatalf("accepted a manifest the key never sealed: %s", b)
			}
		case errors.Is(err, ErrUnauthenticated), errors.Is(err, ErrUnknownKey):
			if m.ID == "" {
				// ErrUnknownKey with no manifest: refused before the check.
				return
			}
		case errors.Is(err, ErrBadManifest), errors.Is(err, ErrBadMAC):
			if m.ID != "" || m.Object != "" {
				t.Fatalf("refused (%v) but returned manifest %+v", err, m)
			}
			return
		default:
			t.Fatalf("error outside the manifest errors: %v", err)
		}
		if cerr := checkManifest(&m); cerr != nil {
			t.Fatalf("returned a manifest that does not agree with itself (%v): %v", err, cerr)
		}
		if strings.Contains(m.Object, "..") || !bytes.HasPrefix([]byte(m.Object), []byte(m.Kind+"/")) {
			t.Fatalf("object %q outside its kind's folder", m.Object)
		}
	})
}

// onTimeline reseals m on a timeline.
func onTimeline(m Manifest, l Lineage, k *AuthKey) Manifest {
	m.Lineage = l
	k.Seal(&m)
	return m
}

// FuzzParseTimelineCommit reads a commit marker as it comes out of a
// store. Beyond never panicking: what it accepts is a marker the key
// sealed, named after the timeline it marks; an error is one of the
// manifest errors and returns no marker.
func FuzzParseTimelineCommit(f *testing.F) {
	k := testAuthKey(9)
	valid := map[string]bool{}
	r := TimelineRecord{Lineage: Lineage{Timeline: 2, ParentTimeline: 1, BranchRevision: 60}, StartRevision: 1_000_000_060, CreatedAt: tlNow}
	k.SealTimeline(&r)
	c := TimelineCommit{Format: ManifestFormat, Timeline: 2, StartRevision: r.StartRevision, RecordMAC: r.MAC, CommittedAt: tlNow, MACKeyID: k.ID()}
	c.MAC = hex.EncodeToString(k.commitMAC(&c))
	valid[string(canonicalCommit(&c).bytes())] = true
	b, _ := json.Marshal(c)
	f.Add(TimelineCommitObject(2), b)
	f.Add(TimelineCommitObject(3), b)
	f.Add("timelines/00000002.committed", []byte(`{"timeline":2}`))
	f.Add("timelines/../x.committed", []byte(`{}`))
	f.Fuzz(func(t *testing.T, name string, b []byte) {
		c, err := ParseTimelineCommit(name, b, k)
		switch {
		case err == nil:
			if !valid[string(canonicalCommit(&c).bytes())] {
				t.Fatalf("accepted a marker the key never sealed: %s", b)
			}
			if name != TimelineCommitObject(c.Timeline) {
				t.Fatalf("accepted marker of timeline %d named %q", c.Timeline, name)
			}
		case errors.Is(err, ErrBadManifest), errors.Is(err, ErrBadMAC), errors.Is(err, ErrUnknownKey):
			if c != (TimelineCommit{}) {
				t.Fatalf("refused (%v) but returned marker %+v", err, c)
			}
		default:
			t.Fatalf("error outside the manifest errors: %v", err)
		}
	})
}
