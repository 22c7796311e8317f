package datadir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
)

// WALDir is where a data dir keeps its WAL when the member runs without
// --wal-dir.
func WALDir(dataDir string) string { return filepath.Join(dataDir, "member", "wal") }

// MemberID reads the member and cluster IDs a WAL directory records: the
// metadata record every WAL file starts with. It needs neither etcd nor
// the database, so it works while the member runs (etcd locks its
// database; reading its WAL files takes no lock).
func MemberID(walDir string) (member, cluster uint64, err error) {
	names, err := filepath.Glob(filepath.Join(walDir, "*.wal"))
	if err != nil || len(names) == 0 {
		return 0, 0, fmt.Errorf("no WAL files in %s", walDir)
	}
	// The oldest file; every file repeats the metadata.
	slices.Sort(names)
	f, err := os.Open(names[0])
	if err != nil {
		return 0, 0, fmt.Errorf("read WAL: %w", err)
	}
	defer f.Close()
	dec := wal.NewDecoder(fileutil.NewFileReader(f))
	// A file starts with the CRC record carried over from the previous
	// file, then the metadata; look a few records further at most.
	for range 4 {
		var rec walpb.Record
		if err := dec.Decode(&rec); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return 0, 0, fmt.Errorf("read WAL %s: %w", names[0], err)
		}
		switch rec.Type {
		case wal.CrcType:
			dec.UpdateCRC(rec.Crc)
		case wal.MetadataType:
			var md etcdserverpb.Metadata
			if err := md.Unmarshal(rec.Data); err != nil {
				return 0, 0, fmt.Errorf("WAL %s: metadata: %w", names[0], err)
			}
			if md.NodeID == 0 {
				return 0, 0, fmt.Errorf("WAL %s: metadata names no member", names[0])
			}
			return md.NodeID, md.ClusterID, nil
		}
	}
	return 0, 0, fmt.Errorf("WAL %s: no metadata record at its start", names[0])
}
