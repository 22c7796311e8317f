package datadir

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
)

// RevisionScanner reads what Revisions reads (the key bucket's last
// revision, the meta bucket's finishedCompactRev) from a bbolt database as
// it streams by in file order, as etcd's snapshot sends it, without the
// file: a full backup then writes the snapshot once (packed), not twice.
//
// Write it the database's bytes (not etcd's appended checksum), then call
// Result. It keeps the meta pages, every branch page, every leaf page that
// holds bucket headers or finishedCompactRev, and the last key of every
// other leaf page: a few megabytes for a gigabyte of database. Its memory
// follows the bytes written, never a size the input declares: at most
// maxScannedPage of the stream is buffered, and it gives up rather than
// keep more than twice the stream.
//
// bbolt's page layout (page.go, meta in db.go): a 16-byte header (id u64,
// flags u16, count u16, overflow u32) then, for branch and leaf pages,
// count 16-byte elements whose key (and a leaf's value) sit at pos bytes
// from the element; integers little-endian.
type RevisionScanner struct {
	pageSize int
	total    int64           // bytes written
	next     int64           // the next page position to examine
	off      int64           // stream offset of buf[0]
	buf      []byte          // bytes from off on, not needed by examined positions
	own      []byte          // the scanner's own storage for buf between writes
	tooLarge map[uint64]bool // pages spanning more than maxScannedPage
	kept     int64           // bytes kept in the maps below
	metas    []scanMeta
	branches map[uint64][]byte // branch pages, whole
	buckets  map[uint64][]byte // leaf pages holding bucket headers, whole
	lastKeys map[uint64][]byte // last key of every other leaf page (nil: empty leaf)
	compact  map[uint64][]byte // finishedCompactRev's value in the leaf pages holding it
	err      error
}

// Page flags and limits of the bbolt format.
const (
	pageHeaderSize  = 16
	elementSize     = 16
	branchPageFlag  = 0x01
	leafPageFlag    = 0x02
	metaPageFlag    = 0x04
	bucketLeafFlag  = 0x01
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	metaSize        = 64
	minPageSize     = 1024
	maxPageSize     = 64 << 10
	maxScannedPage  = 16 << 20 // a page (with its overflow) larger than this is not kept
	maxKeptKey      = 64       // a leaf's last key is kept up to this length (revisions are 17 or 18 bytes)
	compactRevKey   = "finishedCompactRev"
	keyBucketName   = "key"
	metaBucketName  = "meta"
	bucketHeaderLen = 16
)

// ErrScan: the stream is not a bbolt database the scanner can read.
var ErrScan = errors.New("snapshot database does not scan")

type scanMeta struct {
	pageSize uint32
	root     uint64
	highPgid uint64
	txid     uint64
}

// NewRevisionScanner returns a scanner for one database stream.
func NewRevisionScanner() *RevisionScanner {
	return &RevisionScanner{
		branches: map[uint64][]byte{}, buckets: map[uint64][]byte{},
		lastKeys: map[uint64][]byte{}, compact: map[uint64][]byte{}, tooLarge: map[uint64]bool{},
	}
}

func (s *RevisionScanner) fail(format string, a ...any) error {
	if s.err == nil {
		s.err = fmt.Errorf("%w: "+format, append([]any{ErrScan}, a...)...)
	}
	return s.err
}

// Write implements io.Writer. It never fails the writer: an error is kept
// for Result, and later bytes are ignored.
//
// p is examined where it lies when nothing is pending from earlier writes
// (the usual case: a stream written in whole pages), and only what is
// left of it (a page continuing in the next write) is copied; while bytes
// are pending, only as many of p are copied as complete the page they
// begin. Nothing of p is referred to after Write returns.
func (s *RevisionScanner) Write(p []byte) (int, error) {
	n := len(p)
	if s.err != nil {
		return n, nil
	}
	s.total += int64(n)
	for len(p) > 0 && s.err == nil {
		if len(s.buf) == 0 {
			s.buf = p
			s.process(false)
			s.buf = append(s.own[:0], s.buf...)
			s.own = s.buf
			return n, nil
		}
		take := min(len(p), max(s.needed()-len(s.buf), 1))
		s.buf = append(s.buf, p[:take]...)
		p = p[take:]
		s.process(false)
	}
	return n, nil
}

// needed is how many bytes buf must hold for process to go past the
// position it waits at: the first meta page's page size, a whole page,
// or the whole of the page (with its overflow) that starts there.
func (s *RevisionScanner) needed() int {
	if s.pageSize == 0 {
		return pageHeaderSize + 12
	}
	at := int(s.next*int64(s.pageSize) - s.off)
	if len(s.buf) < at+pageHeaderSize {
		return at + s.pageSize
	}
	h := s.buf[at:]
	size := (int64(binary.LittleEndian.Uint32(h[12:])) + 1) * int64(s.pageSize)
	if binary.LittleEndian.Uint64(h) != uint64(s.next) || size > maxScannedPage {
		return at + s.pageSize
	}
	return at + int(size)
}

// process examines every page position whose bytes have arrived.
//
// A database file holds freed pages too, never cleared: a freed page's old
// header may claim an overflow over pages now live, and the middle of an
// old multi-page value may look like anything. So no position is skipped
// on another page's word: every position N whose header says it is page N
// (bbolt writes each page's own id into it) is read as a page with its
// overflow, and the position after it is examined next all the same. The
// tree walk of Result follows only live pointers, to positions whose
// current bytes are the live page. A page spanning more than
// maxScannedPage is not kept (a walk that needs it fails: the caller then
// reads the database from a file).
func (s *RevisionScanner) process(end bool) {
	for s.err == nil {
		if s.pageSize == 0 {
			// The first meta page says the page size (header, then
			// magic u32, version u32, pageSize u32).
			if len(s.buf) < pageHeaderSize+12 {
				break
			}
			ps := binary.LittleEndian.Uint32(s.buf[pageHeaderSize+8:])
			if ps < minPageSize || ps > maxPageSize || ps&(ps-1) != 0 {
				s.fail("page size %d in the first meta page", ps)
				return
			}
			s.pageSize = int(ps)
		}
		at := s.next*int64(s.pageSize) - s.off // of the position in buf
		if int64(len(s.buf)) < at+int64(s.pageSize) {
			break
		}
		h := s.buf[at:]
		id := binary.LittleEndian.Uint64(h)
		flags := binary.LittleEndian.Uint16(h[8:])
		overflow := binary.LittleEndian.Uint32(h[12:])
		size := (int64(overflow) + 1) * int64(s.pageSize)
		switch {
		case id != uint64(s.next) || flags&(branchPageFlag|leafPageFlag|metaPageFlag) == 0:
			// Not a page start (the middle of a multi-page page, a
			// freelist page, or bytes nothing refers to).
		case size > maxScannedPage:
			s.tooLarge[uint64(s.next)] = true
		case int64(len(s.buf)) < at+size:
			if !end {
				return // the rest of this page has not arrived
			}
			// The stream ends inside it: not a live page (Result's
			// length check says so if it was).
		default:
			s.page(uint64(s.next), s.buf[at:at+size])
		}
		s.next++
		// Drop what no position left to examine needs.
		if drop := s.next*int64(s.pageSize) - s.off; drop > 0 && drop <= int64(len(s.buf)) {
			s.buf = s.buf[drop:]
			s.off += drop
		}
	}
	// Keep buf from growing without end: move what is left to the front.
	if cap(s.buf) > 4*maxPageSize && len(s.buf) < cap(s.buf)/4 {
		s.buf = append([]byte(nil), s.buf...)
	}
	if end && s.err == nil && s.pageSize == 0 && s.total > 0 {
		s.fail("the stream ends inside the first meta page (%d bytes)", s.total)
	}
}

// page records what Result needs of one page (pgid from its position).
func (s *RevisionScanner) page(pgid uint64, p []byte) {
	flags := binary.LittleEndian.Uint16(p[8:])
	switch {
	case flags&metaPageFlag != 0:
		if pgid > 1 {
			return // a stale page; only pages 0 and 1 are metas
		}
		m := p[pageHeaderSize : pageHeaderSize+metaSize]
		if binary.LittleEndian.Uint32(m) != boltMagic || binary.LittleEndian.Uint32(m[4:]) != boltVersion {
			s.fail("meta page %d: not a bbolt version 2 meta page", pgid)
			return
		}
		h := fnv.New64a()
		h.Write(m[:56])
		if h.Sum64() != binary.LittleEndian.Uint64(m[56:]) {
			return // an invalid meta: bbolt uses the other
		}
		s.metas = append(s.metas, scanMeta{pageSize: binary.LittleEndian.Uint32(m[8:]), root: binary.LittleEndian.Uint64(m[16:]),
			highPgid: binary.LittleEndian.Uint64(m[40:]), txid: binary.LittleEndian.Uint64(m[48:])})
	case flags&branchPageFlag != 0:
		s.branches[pgid] = s.keep(p)
	case flags&leafPageFlag != 0:
		s.leaf(pgid, p)
	}
}

// leaf records a leaf page: whole when it holds bucket headers, else its
// last key and any finishedCompactRev value.
func (s *RevisionScanner) leaf(pgid uint64, p []byte) {
	n := int(binary.LittleEndian.Uint16(p[10:]))
	var last []byte
	for i := range n {
		flags, k, v, ok := leafElement(p, i)
		if !ok {
			// A page nothing refers to may hold anything (a freed page's
			// old bytes are not cleared); an error only if a walk needs it.
			return
		}
		if flags&bucketLeafFlag != 0 {
			s.buckets[pgid] = s.keep(p)
			return
		}
		if string(k) == compactRevKey {
			s.compact[pgid] = s.keep(v)
		}
		if i == n-1 {
			last = k
		}
	}
	if len(last) > maxKeptKey {
		last = last[:maxKeptKey]
	}
	if last == nil {
		last = []byte{}
	}
	s.lastKeys[pgid] = s.keep(last)
}

// keep copies b for the maps. Pages that overlap (a stale header claiming
// pages now used by others) could make the copies outgrow the stream: past
// twice its size, the scan gives up (the caller reads the file instead).
func (s *RevisionScanner) keep(b []byte) []byte {
	s.kept += int64(len(b))
	if s.kept > 2*s.total+maxPageSize {
		s.fail("pages overlapping: %d bytes kept of a %d-byte stream", s.kept, s.total)
	}
	return bytes.Clone(b)
}

// leafElement returns element i of the leaf page p, ok false when it
// points outside p.
func leafElement(p []byte, i int) (flags uint32, k, v []byte, ok bool) {
	e := pageHeaderSize + i*elementSize
	if e+elementSize > len(p) {
		return 0, nil, nil, false
	}
	flags = binary.LittleEndian.Uint32(p[e:])
	pos := int64(binary.LittleEndian.Uint32(p[e+4:]))
	ks := int64(binary.LittleEndian.Uint32(p[e+8:]))
	vs := int64(binary.LittleEndian.Uint32(p[e+12:]))
	start := int64(e) + pos
	if start+ks+vs > int64(len(p)) {
		return 0, nil, nil, false
	}
	return flags, p[start : start+ks], p[start+ks : start+ks+vs], true
}

// branchElement returns element i of the branch page p.
func branchElement(p []byte, i int) (k []byte, child uint64, ok bool) {
	e := pageHeaderSize + i*elementSize
	if e+elementSize > len(p) {
		return nil, 0, false
	}
	pos := int64(binary.LittleEndian.Uint32(p[e:]))
	ks := int64(binary.LittleEndian.Uint32(p[e+4:]))
	child = binary.LittleEndian.Uint64(p[e+8:])
	start := int64(e) + pos
	if start+ks > int64(len(p)) {
		return nil, 0, false
	}
	return p[start : start+ks], child, true
}

// Result ends the stream and returns what Revisions would return for the
// database written: the revision etcd would resume at and the compacted
// revision.
func (s *RevisionScanner) Result() (rev, compacted int64, err error) {
	s.process(true)
	if s.err != nil {
		return 0, 0, s.err
	}
	var m *scanMeta
	for i := range s.metas {
		if m == nil || s.metas[i].txid > m.txid {
			m = &s.metas[i]
		}
	}
	if m == nil {
		return 0, 0, s.fail("no valid meta page")
	}
	if int(m.pageSize) != s.pageSize {
		return 0, 0, s.fail("the meta page says pages of %d bytes, the first page %d", m.pageSize, s.pageSize)
	}
	if want := int64(m.highPgid) * int64(s.pageSize); s.total != want {
		return 0, 0, s.fail("the database is %d bytes, its meta page says %d", s.total, want)
	}
	kb, err := s.bucket(m.root, keyBucketName)
	if err != nil {
		return 0, 0, err
	}
	if kb == nil {
		return 0, 0, errors.New("database has no key bucket")
	}
	var last int64
	if k, err := s.lastKey(kb); err != nil {
		return 0, 0, err
	} else if len(k) >= 8 {
		last = int64(binary.BigEndian.Uint64(k))
	}
	if mb, err := s.bucket(m.root, metaBucketName); err != nil {
		return 0, 0, err
	} else if mb != nil {
		v, err := s.compactRev(mb)
		if err != nil {
			return 0, 0, err
		}
		if len(v) >= 8 {
			compacted = int64(binary.BigEndian.Uint64(v))
		}
	}
	return max(last, compacted, 1), compacted, nil
}

// missing fails a walk that needs page pgid of what, not kept.
func (s *RevisionScanner) missing(what string, pgid uint64) error {
	if s.tooLarge[pgid] {
		return s.fail("page %d of the %s spans more than %d bytes", pgid, what, maxScannedPage)
	}
	return s.fail("page %d of the %s is not in the stream or malformed", pgid, what)
}

// maxDepth bounds a walk down a tree (a cycle in a malformed file).
const maxDepth = 64

// leafOf walks the tree of what from page root down its branch pages to
// the leaf whose range holds key, or to the last leaf when key is nil (as
// a cursor's Last), and returns that leaf's page id.
func (s *RevisionScanner) leafOf(root uint64, key []byte, what string) (uint64, error) {
	pgid := root
	for range maxDepth {
		p, ok := s.branches[pgid]
		if !ok {
			return pgid, nil
		}
		child, err := s.descend(p, pgid, key)
		if err != nil {
			return 0, err
		}
		pgid = child
	}
	return 0, s.fail("the %s's tree is deeper than %d pages", what, maxDepth)
}

// descend returns the child of branch page p (pgid) whose range holds key:
// the last element whose key is not above it (bbolt's search); the last
// element when key is nil.
func (s *RevisionScanner) descend(p []byte, pgid uint64, key []byte) (uint64, error) {
	n := int(binary.LittleEndian.Uint16(p[10:]))
	if n == 0 {
		return 0, s.fail("branch page %d has no elements", pgid)
	}
	idx := 0
	for i := range n {
		k, _, ok := branchElement(p, i)
		if !ok {
			return 0, s.fail("page %d: element %d outside the page", pgid, i)
		}
		if key != nil && bytes.Compare(k, key) > 0 {
			break
		}
		idx = i
	}
	_, child, _ := branchElement(p, idx)
	return child, nil
}

// bucket returns the header of the top-level bucket name (its value in
// the root bucket's tree at root), nil when there is none.
func (s *RevisionScanner) bucket(root uint64, name string) ([]byte, error) {
	pgid, err := s.leafOf(root, []byte(name), "root bucket")
	if err != nil {
		return nil, err
	}
	p, ok := s.buckets[pgid]
	if !ok {
		if _, leaf := s.lastKeys[pgid]; leaf {
			return nil, nil // a leaf of no buckets: the root bucket is empty
		}
		return nil, s.missing("root bucket", pgid)
	}
	n := int(binary.LittleEndian.Uint16(p[10:]))
	for i := range n {
		flags, k, v, ok := leafElement(p, i)
		if !ok {
			return nil, s.fail("page %d: element %d outside the page", pgid, i)
		}
		if string(k) == name && flags&bucketLeafFlag != 0 {
			if len(v) < bucketHeaderLen {
				return nil, s.fail("bucket %q: header of %d bytes", name, len(v))
			}
			return v, nil
		}
	}
	return nil, nil
}

// inline returns a bucket's inline leaf page (its header's root is 0).
func inline(header []byte) ([]byte, bool) {
	if binary.LittleEndian.Uint64(header) != 0 {
		return nil, false
	}
	return header[bucketHeaderLen:], true
}

// lastKey returns the last key of the bucket with header h (nil when
// empty), as a cursor's Last would.
func (s *RevisionScanner) lastKey(h []byte) ([]byte, error) {
	if p, ok := inline(h); ok {
		if len(p) < pageHeaderSize {
			return nil, nil
		}
		n := int(binary.LittleEndian.Uint16(p[10:]))
		if n == 0 {
			return nil, nil
		}
		_, k, _, ok := leafElement(p, n-1)
		if !ok {
			return nil, s.fail("the key bucket's inline page is malformed")
		}
		return k, nil
	}
	pgid, err := s.leafOf(binary.LittleEndian.Uint64(h), nil, "key bucket")
	if err != nil {
		return nil, err
	}
	k, ok := s.lastKeys[pgid]
	if !ok {
		return nil, s.missing("key bucket", pgid)
	}
	return k, nil
}

// compactRev returns the value of finishedCompactRev in the bucket with
// header h (nil when absent): the only value kept of leaf pages.
func (s *RevisionScanner) compactRev(h []byte) ([]byte, error) {
	key := []byte(compactRevKey)
	if p, ok := inline(h); ok {
		if len(p) < pageHeaderSize {
			return nil, nil
		}
		n := int(binary.LittleEndian.Uint16(p[10:]))
		for i := range n {
			_, k, v, ok := leafElement(p, i)
			if !ok {
				return nil, s.fail("the meta bucket's inline page is malformed")
			}
			if bytes.Equal(k, key) {
				return v, nil
			}
		}
		return nil, nil
	}
	pgid, err := s.leafOf(binary.LittleEndian.Uint64(h), key, "meta bucket")
	if err != nil {
		return nil, err
	}
	if _, ok := s.lastKeys[pgid]; !ok {
		if _, ok := s.buckets[pgid]; !ok {
			return nil, s.missing("meta bucket", pgid)
		}
	}
	return s.compact[pgid], nil
}
