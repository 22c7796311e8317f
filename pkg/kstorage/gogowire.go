package kstorage

// The protobuf wire format as Kubernetes' and etcd's generated (gogo)
// decoders read it. Those decoders are more lenient than the protobuf
// specification (and protowire): a field number is the low 32 bits of the
// tag's varint, a group ends at the next end-group tag at its depth
// whatever its number, a varint's bits past 64 are dropped. Kubernetes
// stores what its decoder accepts, so kstorage reads the same way:
// FuzzDecode, differential against runtime.Unknown, found each difference.

// Wire types.
const (
	wireVarint     = 0
	wireFixed64    = 1
	wireBytes      = 2
	wireStartGroup = 3
	wireEndGroup   = 4
	wireFixed32    = 5
)

// gogoVarint reads a varint at b as gogo does: at most 10 bytes, the bits
// past 64 dropped. n is the bytes read, negative when b ends first or the
// varint is longer.
func gogoVarint(b []byte) (v uint64, n int) {
	for shift := uint(0); shift < 64; shift += 7 {
		if n >= len(b) {
			return 0, -1
		}
		c := b[n]
		n++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, n
		}
	}
	return 0, -1
}

// gogoField reads the field at the start of b as a generated message
// decoder does: its number (the low 32 bits of the tag's varint shifted,
// refused when not positive), its wire type (an end-group tag refused),
// for a length-delimited field its bytes, and the length of the whole
// field. n is negative when the field is malformed.
func gogoField(b []byte) (num int32, typ int, val []byte, n int) {
	wire, i := gogoVarint(b)
	if i < 0 {
		return 0, 0, nil, -1
	}
	num, typ = int32(wire>>3), int(wire&7)
	if typ == wireEndGroup || num <= 0 {
		return 0, 0, nil, -1
	}
	if typ != wireBytes {
		n = gogoSkip(b)
		return num, typ, nil, n
	}
	l, j := gogoVarint(b[i:])
	if j < 0 {
		return 0, 0, nil, -1
	}
	i += j
	end := i + int(l)
	if int(l) < 0 || end < i || end > len(b) {
		return 0, 0, nil, -1
	}
	return num, typ, b[i:end], end
}

// gogoSkip returns the length of the field at the start of b (tag
// included), as the generated skip function measures it: a group runs to
// the end-group tag at its depth. Negative when malformed.
func gogoSkip(b []byte) int {
	i, depth := 0, 0
	for i < len(b) {
		wire, n := gogoVarint(b[i:])
		if n < 0 {
			return -1
		}
		i += n
		switch int(wire & 7) {
		case wireVarint:
			if _, n = gogoVarint(b[i:]); n < 0 {
				return -1
			}
			i += n
		case wireFixed64:
			i += 8
		case wireBytes:
			l, n := gogoVarint(b[i:])
			if n < 0 || int(l) < 0 {
				return -1
			}
			i += n
			if i+int(l) < i {
				return -1
			}
			i += int(l)
		case wireStartGroup:
			depth++
		case wireEndGroup:
			if depth == 0 {
				return -1
			}
			depth--
		case wireFixed32:
			i += 4
		default:
			return -1
		}
		if i > len(b) {
			return -1
		}
		if depth == 0 {
			return i
		}
	}
	return -1
}
