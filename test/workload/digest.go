package workload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// StewardPrefix holds Steward's own keys (the backup leader election):
// left out of a whole-keyspace digest, since a restored cluster's agent
// campaigns anew.
const StewardPrefix = "/steward/"

// Digest identifies the content of a keyspace, or of the keys under a
// prefix, at one revision: every key with its value, create and mod
// revisions, version and lease, in key order. Two clusters whose digests
// are Equal hold the same keys with the same values written at the same
// revisions (a restore that keeps mod revisions, compared with its source).
type Digest struct {
	Prefix string // "": the whole keyspace, Steward's keys (StewardPrefix) excepted
	Rev    int64  // the revision it covers
	Head   int64  // the cluster's revision when it was read (Rev or newer)
	Keys   int    // the keys it covers
	Except int    // how many keys the caller named to leave out (found or not)
	Sum    string // hex SHA-256
}

// ReadDigest reads the digest of the keys under prefix ("" for the whole
// keyspace) at revision rev (0: the current one), leaving out the keys
// named in except: those whose final state is unknown (Result.Unsettled).
func ReadDigest(ctx context.Context, kv clientv3.KV, prefix string, rev int64, except ...string) (Digest, error) {
	var opts []clientv3.OpOption
	if prefix == "" {
		opts = append(opts, clientv3.WithFromKey())
	} else {
		opts = append(opts, clientv3.WithPrefix())
	}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := kv.Get(ctx, prefix, opts...)
	if err != nil {
		return Digest{}, fmt.Errorf("read the keyspace under %q at revision %d: %w", prefix, rev, err)
	}
	h := sha256.New()
	skip := make(map[string]bool, len(except))
	for _, k := range except {
		skip[k] = true
	}
	d := Digest{Prefix: prefix, Rev: rev, Head: resp.Header.Revision, Except: len(skip)}
	if rev <= 0 {
		d.Rev = d.Head
	}
	for _, kv := range resp.Kvs {
		if prefix == "" && bytes.HasPrefix(kv.Key, []byte(StewardPrefix)) || skip[string(kv.Key)] {
			continue
		}
		d.Keys++
		fmt.Fprintf(h, "%q=%q c%d m%d v%d l%d\n", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	d.Sum = hex.EncodeToString(h.Sum(nil))
	return d, nil
}

// TakeDigest is ReadDigest for a test (within 30 s); an error fails it.
func TakeDigest(tb testing.TB, kv clientv3.KV, prefix string, rev int64, except ...string) Digest {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	defer cancel()
	d, err := ReadDigest(ctx, kv, prefix, rev, except...)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// Equal reports whether d and o cover the same keys with the same content
// (the revisions they were read at may differ).
func (d Digest) Equal(o Digest) bool {
	return d.Prefix == o.Prefix && d.Keys == o.Keys && d.Except == o.Except && d.Sum == o.Sum
}

func (d Digest) String() string {
	what := "the keyspace"
	if d.Prefix != "" {
		what = fmt.Sprintf("%q", d.Prefix)
	}
	s := fmt.Sprintf("%s at revision %d: %d keys, sha256 %.16s", what, d.Rev, d.Keys, d.Sum)
	if d.Except > 0 {
		s += fmt.Sprintf(" (%d keys of unknown outcome left out)", d.Except)
	}
	return s
}

// RequireEqual fails the test unless got equals want, saying what was
// compared.
func RequireEqual(tb testing.TB, what string, got, want Digest) {
	tb.Helper()
	if !got.Equal(want) {
		tb.Fatalf("%s: the keyspace differs: got %s, want %s", what, got, want)
	}
}
