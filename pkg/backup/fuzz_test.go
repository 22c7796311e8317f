package backup

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The fuzz targets of this file read untrusted input: a delta segment as
// it comes out of a backup store, and an encrypted object. Their seeds are
// real segments and real encrypted streams written by this package's own
// writers, plus the files under testdata/fuzz/FuzzName/. `go test` runs
// the seeds; `make fuzz` fuzzes each target (docs/testing.md).

// fuzzKey is the fixed key of the encryption fuzz targets and of their
// checked-in corpus (testdata/fuzz/FuzzDecryptReader): a fixed key lets a
// checked-in stream decrypt.
func fuzzKey() *Key {
	var k Key
	k.b = sha256.Sum256([]byte("steward fuzz key: not a secret"))
	return &k
}

// fuzzSeal encrypts plain under k with the package's writer.
func fuzzSeal(tb testing.TB, k *Key, plain []byte) []byte {
	tb.Helper()
	var buf bytes.Buffer
	w, err := NewEncryptWriter(&buf, k)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := w.Write(plain); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// fuzzOpen decrypts a whole stream; on error it returns the plaintext the
// reader handed out before the error.
func fuzzOpen(k *Key, stream []byte) ([]byte, error) {
	r, err := NewDecryptReader(bytes.NewReader(stream), k)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// resealWith seals plain the way encryptWriter does (full chunks, then a
// final chunk that may be empty) under the base nonce base: what an
// authentic stream of plain with that header must be, byte for byte.
func resealWith(k *Key, base, plain []byte) []byte {
	aead := k.aead()
	out := append([]byte(encMagic), base...)
	var i uint64
	for {
		n := min(len(plain), chunkSize)
		// The writer seals a full chunk as non-final only when more
		// data follows it.
		final := len(plain) <= chunkSize
		var l [4]byte
		l[0], l[1], l[2], l[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
		out = append(out, l[:]...)
		out = aead.Seal(out, chunkNonce(base, i), plain[:n], chunkAD(i, final))
		plain = plain[n:]
		i++
		if final {
			return out
		}
	}
}

// FuzzDecryptReader decrypts arbitrary streams under a fixed key. Property:
// the reader either fails, or the stream is authentic: it is, byte for
// byte, the sealing of the plaintext it returned under the key and the
// stream's own base nonce. No tampered, truncated, extended or reordered
// stream yields plaintext without an error. Memory stays bounded: a record
// longer than a chunk is refused before it is read.
func FuzzDecryptReader(f *testing.F) {
	k := fuzzKey()
	for _, n := range []int{0, 1, 100, chunkSize, chunkSize + 1} {
		plain := bytes.Repeat([]byte("steward "), n/8+1)[:n]
		f.Add(fuzzSeal(f, k, plain))
	}
	f.Add([]byte(encMagic))
	f.Add([]byte("not encrypted at all"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		plain, err := fuzzOpen(k, stream)
		if err != nil {
			return
		}
		if len(stream) < len(encMagic)+12 {
			t.Fatalf("a %d-byte stream decrypted", len(stream))
		}
		base := stream[len(encMagic) : len(encMagic)+12]
		if want := resealWith(k, base, plain); !bytes.Equal(stream, want) {
			t.Fatalf("decrypted %d bytes from a stream that is not their sealing (%d bytes, want %d)", len(plain), len(stream), len(want))
		}
	})
}

// FuzzDecryptTampered encrypts a plaintext, then tampers with the stream
// (a byte changed, the stream cut short, bytes appended, two records
// swapped). Property: an intact stream decrypts to the plaintext; a
// tampered one fails, and whatever the reader handed out before failing
// is a prefix of the true plaintext (never forged or garbled bytes).
func FuzzDecryptTampered(f *testing.F) {
	k := fuzzKey()
	f.Add([]byte("hello"), uint8(0), uint32(30), byte(1))
	f.Add([]byte("hello"), uint8(1), uint32(25), byte(0))
	f.Add([]byte("hello"), uint8(2), uint32(0), byte(3))
	f.Add(bytes.Repeat([]byte("x"), 2*chunkSize+10), uint8(0), uint32(chunkSize+100), byte(0x80))
	f.Add(bytes.Repeat([]byte("y"), 2*chunkSize+10), uint8(1), uint32(chunkSize+40), byte(0))
	f.Add(bytes.Repeat([]byte("z"), 2*chunkSize+10), uint8(3), uint32(0), byte(0))
	f.Add([]byte{}, uint8(1), uint32(0), byte(0))
	f.Fuzz(func(t *testing.T, plain []byte, op uint8, pos uint32, val byte) {
		enc := fuzzSeal(t, k, plain)
		got, err := fuzzOpen(k, enc)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("intact stream: %d of %d bytes back, error %v", len(got), len(plain), err)
		}
		tampered := append([]byte(nil), enc...)
		switch op % 4 {
		case 0: // change one byte
			if val == 0 {
				val = 1
			}
			tampered[int(pos)%len(tampered)] ^= val
		case 1: // cut short
			tampered = tampered[:int(pos)%len(tampered)]
		case 2: // append
			tampered = append(tampered, bytes.Repeat([]byte{val}, int(pos%64)+1)...)
		case 3: // swap the first two records (only a stream with two or more)
			hdr := len(encMagic) + 12
			rec := 4 + chunkSize + k.aead().Overhead()
			if len(enc) < hdr+rec+4+k.aead().Overhead() {
				return
			}
			first := append([]byte(nil), enc[hdr:hdr+rec]...)
			rest := enc[hdr+rec:]
			second := rest[:min(len(rest), rec)]
			tampered = append(append(append(append([]byte(nil), enc[:hdr]...), second...), first...), rest[len(second):]...)
			if bytes.Equal(tampered, enc) { // two identical records cannot be told apart
				return
			}
		}
		got, err = fuzzOpen(k, tampered)
		if err == nil {
			t.Fatalf("tampered stream (op %d at %d) decrypted to %d bytes without an error", op%4, pos, len(got))
		}
		if !bytes.HasPrefix(plain, got) {
			t.Fatalf("tampered stream (op %d at %d): %d bytes returned before the error are not a prefix of the plaintext", op%4, pos, len(got))
		}
	})
}

// fuzzRecords is a small but realistic segment's content: a time marker,
// a lease, puts (two in one transaction) and a delete.
func fuzzRecords() []Record {
	at := time.Date(2026, 11, 24, 10, 0, 0, 123, time.UTC)
	return []Record{
		{Type: 'T', Revision: 41, Time: at},
		{Type: 'L', LeaseID: 7587883812345, TTL: 60},
		{Type: 'P', KV: mvccpb.KeyValue{Key: []byte("/registry/configmaps/default/a"), Value: []byte("k8s\x00\x0a\x0f"), CreateRevision: 42, ModRevision: 42, Version: 1, Lease: 7587883812345}},
		{Type: 'P', Sub: 1, KV: mvccpb.KeyValue{Key: []byte("b"), Value: bytes.Repeat([]byte("v"), 300), CreateRevision: 10, ModRevision: 42, Version: 3}},
		{Type: 'T', Revision: 43, Time: at.Add(time.Second)},
		{Type: 'D', KV: mvccpb.KeyValue{Key: []byte("b"), ModRevision: 43}},
		{Type: 'P', KV: mvccpb.KeyValue{Key: []byte("c"), CreateRevision: 44, ModRevision: 44, Version: 1}},
	}
}

// encodeDelta writes records with DeltaWriter.
func encodeDelta(tb testing.TB, recs []Record) []byte {
	tb.Helper()
	var buf bytes.Buffer
	w := NewDeltaWriter(&buf)
	for i := range recs {
		r := &recs[i]
		var err error
		switch r.Type {
		case 'T':
			err = w.Time(r.Revision, r.Time)
		case 'L':
			err = w.Lease(r.LeaseID, r.TTL)
		default:
			err = w.Event(r.Type, r.Sub, &r.KV)
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// decodeDelta reads a whole segment.
func decodeDelta(b []byte) ([]Record, error) {
	r, err := NewDeltaReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	var out []Record
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, rec)
	}
}

// sameRecords compares records by what they encode (a nil and an empty
// key are the same key).
func sameRecords(tb testing.TB, a, b []Record) bool {
	tb.Helper()
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Type != y.Type || x.Sub != y.Sub || x.LeaseID != y.LeaseID || x.TTL != y.TTL || x.Revision != y.Revision || !x.Time.Equal(y.Time) {
			return false
		}
		kx, err1 := x.KV.Marshal()
		ky, err2 := y.KV.Marshal()
		if err1 != nil || err2 != nil {
			tb.Fatalf("marshal: %v %v", err1, err2)
		}
		if !bytes.Equal(kx, ky) {
			return false
		}
	}
	return true
}

// TestDeltaSeedRoundTrip: the fuzz seed, a segment written by DeltaWriter,
// reads back to its records and re-encodes to the same bytes.
func TestDeltaSeedRoundTrip(t *testing.T) {
	want := fuzzRecords()
	seg := encodeDelta(t, want)
	got, err := decodeDelta(seg)
	if err != nil {
		t.Fatal(err)
	}
	if !sameRecords(t, got, want) {
		t.Fatalf("records differ: %+v", got)
	}
	if again := encodeDelta(t, got); !bytes.Equal(again, seg) {
		t.Fatalf("re-encoding differs: %q vs %q", again, seg)
	}
}

// FuzzDeltaReader reads arbitrary segments. Property: the reader returns
// an error or records, and what it returns (also before an error) keeps
// the segment invariant (an event's revision is the previous one with the
// next sub-revision, or the next revision at sub-revision 0). The records
// of a segment read to its end re-encode to a segment that reads back to
// the same records and re-encodes to itself byte for byte: re-encoding is
// a fixed point. (The input itself need not come back byte for byte: the
// reader accepts non-minimal varints and protobuf encodings, which the
// writer never produces; the seeds, written by the writer, do, as
// TestDeltaSeedRoundTrip checks.) An event length above 64 MiB is refused
// before anything is allocated for it.
func FuzzDeltaReader(f *testing.F) {
	f.Add(encodeDelta(f, fuzzRecords()))
	f.Add(encodeDelta(f, fuzzRecords()[:3]))
	f.Add(encodeDelta(f, nil))
	f.Add([]byte(deltaMagic + "P\x00\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := decodeDelta(data)
		seen, lastRev, lastSub := false, int64(0), int64(0)
		for _, r := range recs {
			if r.Type != 'P' && r.Type != 'D' {
				continue
			}
			rev := r.EventRevision()
			ok := !seen || rev == lastRev && r.Sub == lastSub+1 || rev == lastRev+1 && r.Sub == 0
			if !ok {
				t.Fatalf("event %d.%d returned after %d.%d", rev, r.Sub, lastRev, lastSub)
			}
			seen, lastRev, lastSub = true, rev, r.Sub
		}
		if err != nil {
			return
		}
		enc := encodeDelta(t, recs)
		back, err := decodeDelta(enc)
		if err != nil {
			t.Fatalf("re-encoded segment does not read: %v", err)
		}
		if !sameRecords(t, back, recs) {
			t.Fatalf("re-encoded segment reads back differently")
		}
		if again := encodeDelta(t, back); !bytes.Equal(again, enc) {
			t.Fatalf("re-encoding is not a fixed point")
		}
	})
}

// FuzzParseCABundle: any bytes (a CA bundle from disk or from a
// coordinator) are parsed without panicking, and what is accepted is at
// least one certificate.
func FuzzParseCABundle(f *testing.F) {
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("not pem"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		certs, err := ParseCABundle(b)
		if err == nil && len(certs) == 0 {
			t.Fatal("accepted a bundle without a certificate")
		}
	})
}
