package kstorage

// cborTypeMeta reads the top-level map of a CBOR data item (after the
// self-describe tag) for the string members apiVersion and kind, skipping
// every other item. Kubernetes' CBOR serializer writes objects as maps
// whose keys and string values are byte strings (its encoder's
// StringToByteString, so that it never validates UTF-8); text strings are
// read the same way.
func cborTypeMeta(b []byte) (apiVersion, kind []byte, ok bool) {
	major, arg, indefinite, i, ok := cborHead(b, 0)
	// Tags before the map (such as 21, "expected base64url") do not change
	// what it holds: Kubernetes' decoder reads through them (FuzzDecode).
	for tags := 0; ok && major == 6 && tags < 16; tags++ {
		major, arg, indefinite, i, ok = cborHead(b, i)
	}
	if !ok || major != 5 || arg > uint64(len(b)-i) {
		return nil, nil, false
	}
	for n := uint64(0); indefinite || n < arg; n++ {
		if indefinite {
			if i >= len(b) {
				return nil, nil, false
			}
			if b[i] == 0xff {
				return apiVersion, kind, true
			}
		}
		key, next, ok := cborText(b, i)
		if !ok {
			return nil, nil, false
		}
		vstart := next
		if i, ok = cborSkip(b, next, 0); !ok {
			return nil, nil, false
		}
		if key == nil {
			continue
		}
		switch string(key) {
		case "apiVersion":
			if v, _, ok := cborText(b, vstart); ok && v != nil {
				apiVersion = v
			}
		case "kind":
			if v, _, ok := cborText(b, vstart); ok && v != nil {
				kind = v
			}
		}
		if apiVersion != nil && kind != nil {
			return apiVersion, kind, true
		}
	}
	return apiVersion, kind, true
}

// cborText returns the content of the definite-length text or byte string
// at b[i] and the index after it; for any other item it returns nil
// content and the index after the item.
func cborText(b []byte, i int) (text []byte, next int, ok bool) {
	major, arg, indefinite, j, ok := cborHead(b, i)
	if !ok {
		return nil, 0, false
	}
	if (major == 2 || major == 3) && !indefinite {
		if arg > uint64(len(b)-j) {
			return nil, 0, false
		}
		return b[j : j+int(arg)], j + int(arg), true
	}
	next, ok = cborSkip(b, i, 0)
	return nil, next, ok
}

// cborHead decodes the initial byte and argument of the item at b[i].
func cborHead(b []byte, i int) (major byte, arg uint64, indefinite bool, next int, ok bool) {
	if i >= len(b) {
		return 0, 0, false, 0, false
	}
	major, ai := b[i]>>5, b[i]&0x1f
	i++
	switch {
	case ai < 24:
		return major, uint64(ai), false, i, true
	case ai <= 27:
		n := 1 << (ai - 24)
		if len(b)-i < n {
			return 0, 0, false, 0, false
		}
		for _, c := range b[i : i+n] {
			arg = arg<<8 | uint64(c)
		}
		return major, arg, false, i + n, true
	case ai == 31 && major >= 2 && major <= 5:
		return major, 0, true, i, true
	}
	return 0, 0, false, 0, false
}

// cborSkip returns the index after the data item at b[i].
func cborSkip(b []byte, i, depth int) (int, bool) {
	if depth > maxDepth {
		return 0, false
	}
	major, arg, indefinite, j, ok := cborHead(b, i)
	if !ok {
		return 0, false
	}
	switch major {
	case 0, 1, 7: // integers, simple values and floats: the head is all
		return j, true
	case 2, 3: // byte and text strings
		if !indefinite {
			if arg > uint64(len(b)-j) {
				return 0, false
			}
			return j + int(arg), true
		}
		for {
			if j >= len(b) {
				return 0, false
			}
			if b[j] == 0xff {
				return j + 1, true
			}
			if j, ok = cborSkip(b, j, depth+1); !ok {
				return 0, false
			}
		}
	case 4, 5: // arrays and maps
		if arg > uint64(len(b)-j) { // every item takes at least a byte
			return 0, false
		}
		items := arg
		if major == 5 {
			items *= 2
		}
		for n := uint64(0); indefinite || n < items; n++ {
			if indefinite {
				if j >= len(b) {
					return 0, false
				}
				if b[j] == 0xff {
					return j + 1, true
				}
			}
			if j, ok = cborSkip(b, j, depth+1); !ok {
				return 0, false
			}
		}
		return j, true
	case 6: // tag: one item follows
		return cborSkip(b, j, depth+1)
	}
	return 0, false
}
