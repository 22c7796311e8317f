package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/pki"
)

// BenchmarkCompactedRestore: restore time against the length of the delta
// chain, without and with delta compaction (issue 15, deliverable 6). A
// database of STEWARD_BENCH_COMPACT_MB (default 256) is backed up once;
// synthetic delta segments of 500 put events each continue it, the chain
// growing through the lengths of STEWARD_BENCH_COMPACT_SEGMENTS (default
// "100,400,1600" segments). At each length it measures, in the same run:
//   - `steward restore` from the first full backup (the whole chain replayed);
//   - the compaction (backup.Compact, as the backup leader runs it) of the
//     chain but its newest 50 segments, what backup.compactAfter.deltas: 50
//     leaves behind at most;
//   - `steward restore` from that compacted full backup (50 segments replayed).
//
// The segments overwrite 200,000 keys in turn, so the chain's history grows
// with its length while the live keyspace stays the same: the compacted
// backup (history compacted at the chain's end) does not grow with it.
func BenchmarkCompactedRestore(b *testing.B) {
	mb := envInt("STEWARD_BENCH_COMPACT_MB", 256)
	var lengths []int
	for _, s := range strings.Split(envString("STEWARD_BENCH_COMPACT_SEGMENTS", "100,400,1600"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= compactTail {
			b.Fatalf("STEWARD_BENCH_COMPACT_SEGMENTS: %q is not a length above %d", s, compactTail)
		}
		lengths = append(lengths, n)
	}
	for i := 0; i < b.N; i++ {
		e, full, store := backedUpStopped(b, mb)
		auth, err := backup.LoadAuthKey(filepath.Join(e.Dir, "pki", pki.BackupAuthKey))
		if err != nil {
			b.Fatal(err)
		}
		value := bytes.Repeat([]byte("d"), 100)
		rev := full.EndRevision
		var deltas []backup.Manifest
		for _, length := range lengths {
			for len(deltas) < length {
				var buf bytes.Buffer
				w := backup.NewDeltaWriter(&buf)
				start := rev + 1
				for j := 0; j < compactSegmentEvents; j++ {
					rev++
					k := fmt.Sprintf("delta/%07d", rev%200000)
					kv := mvccpb.KeyValue{Key: []byte(k), Value: value, CreateRevision: rev, ModRevision: rev, Version: 1}
					if err := w.Event('P', 0, &kv); err != nil {
						b.Fatal(err)
					}
				}
				if err := w.Flush(); err != nil {
					b.Fatal(err)
				}
				d, err := backup.PutDelta(b.Context(), store, nil, auth, backup.DeltaInfo{
					ClusterID: full.ClusterID, Start: start, End: rev, Events: compactSegmentEvents, Now: time.Now(),
				}, buf.Bytes())
				if err != nil {
					b.Fatal(err)
				}
				deltas = append(deltas, d)
			}

			chainDur := timeRestore(b, e.Bin, e.Dir, full.ID)

			folded := backup.Chain{Full: full, Deltas: deltas[:length-compactTail]}
			tmp := b.TempDir()
			start := time.Now()
			res, err := backup.Compact(b.Context(), store, backup.CompactOptions{Chain: folded, Auth: auth, TempDir: tmp})
			if err != nil {
				b.Fatal(err)
			}
			compactDur := time.Since(start)
			compactedDur := timeRestore(b, e.Bin, e.Dir, res.Backup.ID)

			events := length * compactSegmentEvents
			b.ReportMetric(chainDur.Seconds(), fmt.Sprintf("restore-chain-%d-s", length))
			b.ReportMetric(compactDur.Seconds(), fmt.Sprintf("compact-%d-s", length))
			b.ReportMetric(compactedDur.Seconds(), fmt.Sprintf("restore-compacted-%d-s", length))
			b.ReportMetric(float64(res.Backup.RawSize)/(1<<20), fmt.Sprintf("compacted-db-%d-MB", length))
			b.Logf("%d MB + %d segments (%d events): restore from the chain %s; compaction of %d segments %s (database %d MB, stored %d MB); restore from the compacted backup + %d segments %s",
				mb, length, events, chainDur.Round(time.Millisecond), length-compactTail, compactDur.Round(time.Millisecond),
				res.Backup.RawSize>>20, res.Backup.Size>>20, compactTail, compactedDur.Round(time.Millisecond))
		}
	}
}

// compactSegmentEvents is the events per synthetic segment; compactTail the
// segments a compaction leaves after its new full backup.
const (
	compactSegmentEvents = 500
	compactTail          = 50
)

// envString is the environment variable name, or def when it is empty.
func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// timeRestore runs `steward restore --force --backup id` and returns its
// wall time.
func timeRestore(b *testing.B, bin, dir, id string) time.Duration {
	b.Helper()
	start := time.Now()
	out, err := exec.Command(bin, "restore", "--force", "--backup", id, "--dir", dir).CombinedOutput()
	if err != nil {
		b.Fatalf("steward restore --backup %s: %v\n%s", id, err, out)
	}
	return time.Since(start)
}
