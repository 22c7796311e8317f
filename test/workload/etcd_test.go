package workload_test

import (
	"testing"
	"time"

	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// TestAgainstEtcd runs the writer and the digest against a real one-member
// cluster: two workers writing two keys per transaction; every
// acknowledged write is read back, and a deleted one is reported lost; a
// digest at a revision does not change with later writes, the current one
// does.
func TestAgainstEtcd(t *testing.T) {
	e := harness.New(t)
	e.Up(1, harness.Versions()[1])
	cli := e.Client()
	w := workload.Start(t, cli, workload.Options{Prefix: "real", Workers: 2, KeysPerWrite: 2})
	harness.Eventually(t, time.Minute, 10*time.Millisecond, "300 acknowledged writes", w.AckedAbove(299))
	r := w.Stop()
	t.Log(r)
	workload.RequireKeys(t, cli, r)
	revs := map[int64]bool{}
	for _, wr := range r.Acked {
		if revs[wr.Rev] {
			t.Fatalf("two writes acknowledged at revision %d", wr.Rev)
		}
		revs[wr.Rev] = true
	}

	at := workload.TakeDigest(t, cli, "", r.MaxRev)
	prefix := workload.TakeDigest(t, cli, "real/", r.MaxRev)
	if prefix.Keys < 2*len(r.Acked) || at.Keys < prefix.Keys {
		t.Fatalf("digests at revision %d: %s and %s; want at least %d keys under real/", r.MaxRev, at, prefix, 2*len(r.Acked))
	}
	victim := r.Acked[len(r.Acked)/2]
	del, err := cli.Delete(t.Context(), victim.Keys[1])
	if err != nil || del.Deleted != 1 {
		t.Fatalf("delete %s: %v %v", victim.Keys[1], del, err)
	}
	lost, err := workload.Missing(t.Context(), cli, r)
	if err != nil || len(lost) != 1 || lost[0].Index != victim.Index {
		t.Fatalf("after deleting %s: lost %v, %v; want exactly write %d", victim.Keys[1], lost, err, victim.Index)
	}
	workload.RequireEqual(t, "the digest at the same revision after a deletion", workload.TakeDigest(t, cli, "", r.MaxRev), at)
	if now := workload.TakeDigest(t, cli, "", 0); now.Equal(at) || now.Keys != at.Keys-1 || now.Head < del.Header.Revision {
		t.Fatalf("the current digest after a deletion: %s, want one key fewer than %s, read at %d or later", now, at, del.Header.Revision)
	}
}
