package backup

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// KindDelta is a segment of events recorded after a full snapshot.
const KindDelta = "delta"

// Delta segment format (before compression and encryption):
//
//	magic "STWDELTA1\n", then records, each one type byte:
//	'T' time marker: varint revision, varint unix nanoseconds. Written
//	    before the events received at that time; restore --to-time stops at
//	    the first marker later than the target.
//	'L' lease: varint lease ID, varint granted TTL in seconds. Written
//	    before the first put that uses the lease.
//	'P' put, 'D' delete: uvarint sub-revision, uvarint length, then the
//	    event's mvccpb.KeyValue (for a delete: key and mod revision).
//
// Invariant (checked when reading): event revisions never decrease, and a
// new revision is exactly the previous one plus one: a segment holds every
// revision of its range, so a gap in it is corruption, not quiet history.
const deltaMagic = "STWDELTA1\n"

// Record is one entry of a delta segment.
type Record struct {
	Type byte // 'T', 'L', 'P' or 'D'
	// For 'P' and 'D'.
	Sub int64
	KV  mvccpb.KeyValue
	// For 'L'.
	LeaseID, TTL int64
	// For 'T'.
	Revision int64
	Time     time.Time
}

// Revision of an event record.
func (r *Record) EventRevision() int64 { return r.KV.ModRevision }

// DeltaWriter encodes records.
type DeltaWriter struct {
	w       *bufio.Writer
	started bool
	buf     [2 * binary.MaxVarintLen64]byte
	Events  int
	Bytes   int64
}

// NewDeltaWriter returns a writer of a delta segment into w.
func NewDeltaWriter(w io.Writer) *DeltaWriter {
	return &DeltaWriter{w: bufio.NewWriterSize(w, 64<<10)}
}

func (d *DeltaWriter) head() error {
	if d.started {
		return nil
	}
	d.started = true
	n, err := d.w.WriteString(deltaMagic)
	d.Bytes += int64(n)
	return err
}

func (d *DeltaWriter) varints(typ byte, signed bool, vs ...int64) error {
	if err := d.head(); err != nil {
		return err
	}
	if err := d.w.WriteByte(typ); err != nil {
		return err
	}
	d.Bytes++
	for _, v := range vs {
		var n int
		if signed {
			n = binary.PutVarint(d.buf[:], v)
		} else {
			n = binary.PutUvarint(d.buf[:], uint64(v))
		}
		if _, err := d.w.Write(d.buf[:n]); err != nil {
			return err
		}
		d.Bytes += int64(n)
	}
	return nil
}

// Time writes a time marker.
func (d *DeltaWriter) Time(rev int64, t time.Time) error {
	return d.varints('T', true, rev, t.UnixNano())
}

// Lease writes a lease grant.
func (d *DeltaWriter) Lease(id, ttl int64) error {
	return d.varints('L', true, id, ttl)
}

// Event writes a put or delete.
func (d *DeltaWriter) Event(typ byte, sub int64, kv *mvccpb.KeyValue) error {
	b, err := kv.Marshal()
	if err != nil {
		return err
	}
	if err := d.varints(typ, false, sub, int64(len(b))); err != nil {
		return err
	}
	n, err := d.w.Write(b)
	d.Bytes += int64(n)
	d.Events++
	return err
}

// Flush writes buffered records.
func (d *DeltaWriter) Flush() error {
	if err := d.head(); err != nil {
		return err
	}
	return d.w.Flush()
}

// maxEventSize bounds one event's encoding (etcd's own request limit is
// far below it).
const maxEventSize = 64 << 20

// eventPrealloc is the largest event length readEvent allocates up front;
// a longer one grows its buffer as the bytes arrive.
const eventPrealloc = 64 << 10

// readEvent reads an event of declared length n (at most maxEventSize)
// from r. Memory follows what r holds, not what the length claims: a
// segment cut short, or forged to declare 64 MiB in a few bytes, costs
// what it holds (the buffer at most doubles past it), never n. A stream
// that ends early is io.ErrUnexpectedEOF.
func readEvent(r io.Reader, n uint64) ([]byte, error) {
	if n <= eventPrealloc {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		return b, nil
	}
	var buf bytes.Buffer
	got, err := buf.ReadFrom(io.LimitReader(r, int64(n)))
	if err != nil {
		return nil, err
	}
	if uint64(got) < n {
		return nil, io.ErrUnexpectedEOF
	}
	return buf.Bytes(), nil
}

// DeltaReader decodes a segment and checks its revision invariant.
type DeltaReader struct {
	r       *bufio.Reader
	lastRev int64
	lastSub int64
}

// NewDeltaReader checks the magic and returns a reader.
func NewDeltaReader(r io.Reader) (*DeltaReader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	m := make([]byte, len(deltaMagic))
	if _, err := io.ReadFull(br, m); err != nil || string(m) != deltaMagic {
		return nil, errors.New("not a Steward delta segment (bad header)")
	}
	return &DeltaReader{r: br}, nil
}

// Next returns the next record, or io.EOF at the end.
func (d *DeltaReader) Next() (Record, error) {
	typ, err := d.r.ReadByte()
	if err == io.EOF {
		return Record{}, io.EOF
	}
	if err != nil {
		return Record{}, err
	}
	rec := Record{Type: typ}
	bad := func(what string, err error) (Record, error) {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Record{}, fmt.Errorf("delta segment is corrupt: %s: %w", what, err)
	}
	switch typ {
	case 'T':
		rev, err := binary.ReadVarint(d.r)
		if err != nil {
			return bad("time marker", err)
		}
		ns, err := binary.ReadVarint(d.r)
		if err != nil {
			return bad("time marker", err)
		}
		rec.Revision, rec.Time = rev, time.Unix(0, ns).UTC()
	case 'L':
		if rec.LeaseID, err = binary.ReadVarint(d.r); err != nil {
			return bad("lease", err)
		}
		if rec.TTL, err = binary.ReadVarint(d.r); err != nil {
			return bad("lease", err)
		}
	case 'P', 'D':
		sub, err := binary.ReadUvarint(d.r)
		if err != nil {
			return bad("event", err)
		}
		n, err := binary.ReadUvarint(d.r)
		if err != nil {
			return bad("event length", err)
		}
		if n > maxEventSize {
			return Record{}, fmt.Errorf("delta segment is corrupt: event length %d exceeds the limit of %d bytes", n, maxEventSize)
		}
		b, err := readEvent(d.r, n)
		if err != nil {
			return bad("event", err)
		}
		if err := rec.KV.Unmarshal(b); err != nil {
			return bad("event", err)
		}
		rec.Sub = int64(sub)
		rev := rec.KV.ModRevision
		switch {
		case rev < 1: // etcd's revisions start at 1; lastRev 0 means no event yet
			return Record{}, fmt.Errorf("delta segment is corrupt: event at revision %d", rev)
		case d.lastRev == 0:
		case rev == d.lastRev && rec.Sub == d.lastSub+1:
		case rev == d.lastRev+1 && rec.Sub == 0:
		default:
			return Record{}, fmt.Errorf("delta segment is corrupt: event at revision %d.%d follows %d.%d", rev, rec.Sub, d.lastRev, d.lastSub)
		}
		d.lastRev, d.lastSub = rev, rec.Sub
	default:
		return Record{}, fmt.Errorf("delta segment is corrupt: unknown record type %q", typ)
	}
	return rec, nil
}
