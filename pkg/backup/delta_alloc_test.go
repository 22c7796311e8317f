package backup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// TestDeltaReaderMemoryFollowsInput: an event that declares the largest
// length (64 MiB) but holds a few bytes is refused as cut short without
// allocating what it declares; a real event above the preallocation size
// still decodes.
func TestDeltaReaderMemoryFollowsInput(t *testing.T) {
	event := func(n uint64, body []byte) []byte {
		b := []byte(deltaMagic + "P")
		b = binary.AppendUvarint(b, 0)
		b = binary.AppendUvarint(b, n)
		return append(b, body...)
	}

	t.Run("a declared 64 MiB event holding 10 bytes", func(t *testing.T) {
		in := event(maxEventSize, []byte("0123456789"))
		d, err := NewDeltaReader(bytes.NewReader(in))
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err = d.Next()
		runtime.ReadMemStats(&after)
		if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "delta segment is corrupt: event") {
			t.Fatalf("Next = %v; want a corrupt event, unexpected EOF", err)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
			t.Errorf("Next allocated %d bytes for a 10-byte event declaring %d; want memory following the input (under 1 MiB)", got, maxEventSize)
		}
	})

	t.Run("a real event of 200 KiB", func(t *testing.T) {
		kv := mvccpb.KeyValue{Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 200<<10), ModRevision: 5, CreateRevision: 5, Version: 1}
		b, err := kv.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		d, err := NewDeltaReader(bytes.NewReader(event(uint64(len(b)), b)))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := d.Next()
		if err != nil {
			t.Fatal(err)
		}
		if rec.KV.ModRevision != 5 || !bytes.Equal(rec.KV.Value, kv.Value) {
			t.Errorf("decoded revision %d, %d value bytes; want 5, %d", rec.KV.ModRevision, len(rec.KV.Value), len(kv.Value))
		}
		if _, err := d.Next(); err != io.EOF {
			t.Errorf("after the event: %v; want io.EOF", err)
		}
	})

	t.Run("a short event within the preallocation, cut short", func(t *testing.T) {
		d, err := NewDeltaReader(bytes.NewReader(event(100, []byte("abc"))))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("Next = %v; want unexpected EOF", err)
		}
	})
}
