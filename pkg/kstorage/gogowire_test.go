package kstorage

import "testing"

// TestGogoWire: fields are measured as Kubernetes' generated decoders
// measure them, including what the protobuf specification refuses and they
// accept (a group closed by another number's end tag, a field number past
// 2^29, an 11th varint byte refused).
func TestGogoWire(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		skip int // gogoSkip's result
	}{
		{"varint", []byte{0x08, 0x96, 0x01, 0xff}, 3},
		{"fixed64", []byte{0x09, 1, 2, 3, 4, 5, 6, 7, 8}, 9},
		{"fixed32 cut short", []byte{0x0d, 1, 2}, -1},
		{"bytes", []byte{0x0a, 0x02, 'h', 'i', 0x00}, 4},
		{"bytes longer than the input", []byte{0x0a, 0x05, 'h'}, -1},
		{"group closed by its own number", []byte{0x0b, 0x08, 0x01, 0x0c}, 4},
		{"group closed by another number", []byte{0x43, 0x24}, 2},
		{"nested groups", []byte{0x0b, 0x13, 0x14, 0x0c, 0x08}, 4},
		{"end tag with a field number past 2^29", []byte{0x43, 0xb4, 0xb4, 0xb4, 0xb4, 0xb4, 0x30}, 7},
		{"end group first", []byte{0x0c}, -1},
		{"group never closed", []byte{0x0b, 0x08, 0x01}, -1},
		{"wire type 6", []byte{0x0e}, -1},
		{"11-byte varint", []byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, -1},
	} {
		if got := gogoSkip(tc.b); got != tc.skip {
			t.Errorf("%s: gogoSkip = %d, want %d", tc.name, got, tc.skip)
		}
	}
	// gogoField: a field number is the low 32 bits, positive.
	if num, typ, v, n := gogoField([]byte{0x8a, 0x80, 0x80, 0x80, 0x80, 0x04, 0x01, 'x'}); num != 1 || typ != wireBytes || string(v) != "x" || n != 8 {
		t.Errorf("field 1+2^32: %d %d %q %d", num, typ, v, n)
	}
	for name, b := range map[string][]byte{"field 0": {0x02, 0x00}, "end group": {0x0c}} {
		if _, _, _, n := gogoField(b); n >= 0 {
			t.Errorf("%s: gogoField accepted it (%d)", name, n)
		}
	}
}
