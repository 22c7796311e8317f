package kmigrate

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/client-go/kubernetes/scheme"
)

// Media types of the requests and answers of a migration.
const (
	mediaJSON     = "application/json"
	mediaProtobuf = "application/vnd.kubernetes.protobuf"
	// acceptProtobuf asks for protobuf, or JSON from a server that cannot
	// encode the resource so: the answer's Content-Type says which came.
	acceptProtobuf = mediaProtobuf + ", " + mediaJSON
)

// protoMagic starts every protobuf message of the Kubernetes API; the
// envelope (a runtime.Unknown message) follows it.
var protoMagic = []byte("k8s\x00")

// Field numbers of the Kubernetes protobuf messages read here (from
// k8s.io/apimachinery's generated.proto files). Every built-in list has
// its ListMeta in field 1 and its items in field 2, and every object its
// ObjectMeta in field 1.
const (
	unknownTypeMeta = 1 // runtime.Unknown: TypeMeta typeMeta = 1
	unknownRaw      = 2 //                  bytes raw = 2
	typeMetaAPIVer  = 1 // runtime.TypeMeta: apiVersion = 1
	typeMetaKind    = 2 //                   kind = 2
	listMeta        = 1 // XList: ListMeta metadata = 1
	listItems       = 2 //        repeated X items = 2
	listContinue    = 3 // ListMeta: continue = 3
	listRemaining   = 4 //           remainingItemCount = 4
	objectMeta      = 1 // X: ObjectMeta metadata = 1
	metaName        = 1 // ObjectMeta: name = 1
	metaNamespace   = 3 //             namespace = 3
)

// UsesProtobuf reports whether a migration asks for the resource in
// protobuf: a built-in kind (one client-go's scheme knows, in the
// version migrated). Custom resources and aggregated APIs are JSON only.
func UsesProtobuf(r Resource) bool {
	return r.Kind != "" && scheme.Scheme.Recognizes(r.GroupVersion().WithKind(r.Kind))
}

// isProtobuf reports whether a Content-Type is Kubernetes protobuf.
func isProtobuf(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == mediaProtobuf
}

// fields calls fn for each field of a protobuf message: its number, and
// its value (the bytes of a length-delimited field, the number of a
// varint; other wire types are skipped).
func fields(b []byte, fn func(num protowire.Number, bytes []byte, varint uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.BytesType || typ == protowire.VarintType {
			if err := fn(num, v, x); err != nil {
				return err
			}
		}
	}
	return nil
}

// envelope is a runtime.Unknown message: an object's type and its
// message (without TypeMeta, which protobuf objects do not carry).
type envelope struct {
	apiVersion, kind string
	raw              []byte
}

// parseEnvelope reads a protobuf answer of the API server: the magic
// bytes, then the envelope. raw points into b.
func parseEnvelope(b []byte) (envelope, error) {
	var e envelope
	if !bytes.HasPrefix(b, protoMagic) {
		return e, errors.New("not a Kubernetes protobuf message (no k8s magic prefix)")
	}
	err := fields(b[len(protoMagic):], func(num protowire.Number, v []byte, _ uint64) error {
		switch num {
		case unknownTypeMeta:
			return fields(v, func(num protowire.Number, v []byte, _ uint64) error {
				switch num {
				case typeMetaAPIVer:
					e.apiVersion = string(v)
				case typeMetaKind:
					e.kind = string(v)
				}
				return nil
			})
		case unknownRaw:
			e.raw = v
		}
		return nil
	})
	return e, err
}

// appendEnvelope appends the protobuf encoding of an object for a request
// body: the magic bytes and an envelope naming its type around raw, the
// object's message exactly as the API server sent it.
func appendEnvelope(dst []byte, apiVersion, kind string, raw []byte) []byte {
	tm := protowire.AppendTag(nil, typeMetaAPIVer, protowire.BytesType)
	tm = protowire.AppendString(tm, apiVersion)
	tm = protowire.AppendTag(tm, typeMetaKind, protowire.BytesType)
	tm = protowire.AppendString(tm, kind)
	dst = append(dst, protoMagic...)
	dst = protowire.AppendTag(dst, unknownTypeMeta, protowire.BytesType)
	dst = protowire.AppendBytes(dst, tm)
	dst = protowire.AppendTag(dst, unknownRaw, protowire.BytesType)
	return protowire.AppendBytes(dst, raw)
}

// objectMetaOf reads an object message's name and namespace.
func objectMetaOf(msg []byte) (namespace, name string, err error) {
	err = fields(msg, func(num protowire.Number, v []byte, _ uint64) error {
		if num != objectMeta {
			return nil
		}
		return fields(v, func(num protowire.Number, v []byte, _ uint64) error {
			switch num {
			case metaName:
				name = string(v)
			case metaNamespace:
				namespace = string(v)
			}
			return nil
		})
	})
	return namespace, name, err
}

// decodeProtoPage parses a list answer in protobuf: the continue token,
// the remaining count, and each item as a request body of its own (the
// item's message in an envelope naming apiVersion and kind: the list's
// kind without List). The items are not decoded: what is sent back is
// exactly what was read, resourceVersion included.
func decodeProtoPage(body []byte) (page, error) {
	env, err := parseEnvelope(body)
	if err != nil {
		return page{}, fmt.Errorf("decode list: %w", err)
	}
	if env.apiVersion == "" || !strings.HasSuffix(env.kind, "List") {
		return page{}, fmt.Errorf("decode list: the answer is a %q %q, not a list", env.apiVersion, env.kind)
	}
	kind := strings.TrimSuffix(env.kind, "List")
	p := page{remaining: -1}
	err = fields(env.raw, func(num protowire.Number, v []byte, _ uint64) error {
		switch num {
		case listMeta:
			return fields(v, func(num protowire.Number, v []byte, x uint64) error {
				switch num {
				case listContinue:
					p.next = string(v)
				case listRemaining:
					p.remaining = int64(x)
				}
				return nil
			})
		case listItems:
			ns, name, err := objectMetaOf(v)
			if err != nil {
				return fmt.Errorf("object: %w", err)
			}
			if name == "" {
				return errors.New("object: no metadata.name")
			}
			p.objects = append(p.objects, object{namespace: ns, name: name, contentType: mediaProtobuf,
				body: appendEnvelope(make([]byte, 0, len(v)+len(env.apiVersion)+len(kind)+len(protoMagic)+16), env.apiVersion, kind, v)})
		}
		return nil
	})
	if err != nil {
		return page{}, fmt.Errorf("decode list: %w", err)
	}
	if n := len(p.objects); n > 0 {
		p.lastKey = p.objects[n-1].key()
	}
	return p, nil
}
