package workload_test

import (
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/test/workload"
)

func clientWithPrefix() []clientv3.OpOption { return []clientv3.OpOption{clientv3.WithPrefix()} }

// load applies the same writes to a fake keyspace: a, b, a again, c with a
// lease, and a Steward key.
func load(t *testing.T, f *fakeKV) {
	t.Helper()
	for _, w := range []struct {
		key, value string
		lease      int64
	}{{"app/a", "1", 0}, {"app/b", "2", 0}, {"app/a", "3", 0}, {"other/c", "4", 7}, {workload.StewardPrefix + "backup-leader/1", "agent", 9}} {
		if _, err := f.apply([]string{w.key}, w.value, w.lease); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDigest: two keyspaces with the same history have equal digests, of
// the whole keyspace and of a prefix; any difference in a value, a
// revision or a lease shows; Steward's own keys do not count; a digest at
// an old revision does not see later writes.
func TestDigest(t *testing.T) {
	a, b := newFakeKV(), newFakeKV()
	load(t, a)
	load(t, b)
	da, db := workload.TakeDigest(t, a, "", 0), workload.TakeDigest(t, b, "", 0)
	if !da.Equal(db) || da.Keys != 3 || da.Rev != a.rev || da.Head != a.rev {
		t.Fatalf("same history: %s and %s; want equal, 3 keys (the Steward key left out), at revision %d", da, db, a.rev)
	}
	pa := workload.TakeDigest(t, a, "app/", 0)
	if pa.Keys != 2 || pa.Equal(da) {
		t.Fatalf("digest of app/: %s; want 2 keys, not equal to the whole keyspace's", pa)
	}

	// Only Steward's keys change: equal.
	if _, err := b.apply([]string{workload.StewardPrefix + "backup-leader/2"}, "agent", 11); err != nil {
		t.Fatal(err)
	}
	if db2 := workload.TakeDigest(t, b, "", 0); !db2.Equal(da) {
		t.Fatalf("a change under %s changed the digest: %s, was %s", workload.StewardPrefix, db2, da)
	}

	for name, change := range map[string]func(f *fakeKV) error{
		"a value": func(f *fakeKV) error { _, err := f.apply([]string{"app/b"}, "changed", 0); return err },
		// The same value written again: only its revisions change.
		"a mod revision": func(f *fakeKV) error { _, err := f.apply([]string{"app/b"}, "2", 0); return err },
		"a lease":        func(f *fakeKV) error { _, err := f.apply([]string{"other/c"}, "4", 8); return err },
		"a deletion":     func(f *fakeKV) error { f.remove("app/b"); return nil },
	} {
		t.Run(name, func(t *testing.T) {
			c := newFakeKV()
			load(t, c)
			before := c.rev
			if err := change(c); err != nil {
				t.Fatal(err)
			}
			if d := workload.TakeDigest(t, c, "", 0); d.Equal(da) {
				t.Fatalf("%s changed, the digest did not: %s", name, d)
			}
			old := workload.TakeDigest(t, c, "", before)
			if !old.Equal(da) || old.Rev != before || old.Head != c.rev {
				t.Fatalf("digest at revision %d after the change: %s (read at %d); want %s", before, old, old.Head, da)
			}
		})
	}
}

// TestDigestExcept: keys named as of unknown outcome are left out on both
// sides, whether one side has them or not, and only digests that left out
// the same number of keys compare equal.
func TestDigestExcept(t *testing.T) {
	a, b := newFakeKV(), newFakeKV()
	load(t, a)
	load(t, b)
	// A late commit on b: app/a written again, and a key a failed
	// write meant to create.
	for _, k := range []string{"app/a", "app/late"} {
		if _, err := b.apply([]string{k}, "9", 0); err != nil {
			t.Fatal(err)
		}
	}
	if da, db := workload.TakeDigest(t, a, "", 0), workload.TakeDigest(t, b, "", 0); da.Equal(db) {
		t.Fatalf("the late writes must show without except: %s and %s", da, db)
	}
	unsettled := []string{"app/a", "app/late"}
	da, db := workload.TakeDigest(t, a, "", 0, unsettled...), workload.TakeDigest(t, b, "", 0, unsettled...)
	if !da.Equal(db) || da.Keys != 2 || da.Except != 2 {
		t.Fatalf("with the unsettled keys left out: %s and %s; want equal, 2 keys", da, db)
	}
	if !strings.Contains(da.String(), "2 keys of unknown outcome left out") {
		t.Errorf("String does not say keys were left out: %s", da)
	}
	// A settled key that differs still shows.
	if _, err := b.apply([]string{"app/b"}, "changed", 0); err != nil {
		t.Fatal(err)
	}
	if db := workload.TakeDigest(t, b, "", 0, unsettled...); db.Equal(da) {
		t.Fatalf("a settled key changed, the digest did not: %s", db)
	}
	// Left out differently: not comparable.
	if d1, d2 := workload.TakeDigest(t, a, "other/", 0, "x"), workload.TakeDigest(t, a, "other/", 0); d1.Equal(d2) {
		t.Fatalf("digests leaving out different key sets compare equal: %s and %s", d1, d2)
	}
}
