package kmigrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// object is one listed object, ready to be sent back as it is.
type object struct {
	namespace, name string
	// body is the request body of the update: the object's JSON with
	// apiVersion and kind (list items come without them), or its protobuf
	// message in an envelope naming them; contentType says which.
	body        []byte
	contentType string
}

func (o object) key() string { return objectKey(o.namespace, o.name) }

// objectKey is an object's position in list order: NAMESPACE/NAME, or
// NAME for cluster-scoped objects. kube-apiserver stores an object under
// PREFIX/RESOURCE/NAMESPACE/NAME (or PREFIX/RESOURCE/NAME) and lists a
// resource in the byte order of these keys; since every key of a resource
// shares PREFIX/RESOURCE/, comparing objectKeys byte by byte gives the
// same order. Note that this is not "by namespace, then by name": the
// separator "/" sorts after "-" and ".", so namespace a-b's objects
// ("a-b/x") come before namespace a's ("a/z"), exactly as in etcd.
func objectKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// page is one answer to a list request.
type page struct {
	objects []object
	next    string
	// remaining is the server's remainingItemCount: objects after this
	// page; -1 when it did not say.
	remaining int64
	// lastKey is the key of the last object of the page (before any
	// filtering); empty for an empty page.
	lastKey string
}

// decodePage parses a list response, protobuf or JSON as its
// Content-Type says (decodeProtoPage, decodeJSONPage).
func decodePage(body []byte, contentType string) (page, error) {
	if isProtobuf(contentType) {
		return decodeProtoPage(body)
	}
	return decodeJSONPage(body)
}

// decodeJSONPage parses a list response in JSON: the continue token, the
// remaining count and each item as raw JSON, to which it adds apiVersion
// and kind from the list's (KindList without List) when missing.
func decodeJSONPage(body []byte) (page, error) {
	var l struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Continue           string `json:"continue"`
			RemainingItemCount *int64 `json:"remainingItemCount"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return page{}, fmt.Errorf("decode list: %w", err)
	}
	p := page{next: l.Metadata.Continue, remaining: -1}
	if c := l.Metadata.RemainingItemCount; c != nil {
		p.remaining = *c
	}
	kind := strings.TrimSuffix(l.Kind, "List")
	p.objects = make([]object, 0, len(l.Items))
	for _, raw := range l.Items {
		o, err := prepare(raw, l.APIVersion, kind)
		if err != nil {
			return page{}, err
		}
		p.objects = append(p.objects, o)
	}
	if n := len(p.objects); n > 0 {
		p.lastKey = p.objects[n-1].key()
	}
	return p, nil
}

// prepare reads an object's name and namespace and makes sure its JSON
// names apiVersion and kind.
func prepare(raw []byte, apiVersion, kind string) (object, error) {
	var h struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return object{}, fmt.Errorf("decode object: %w", err)
	}
	if h.Metadata.Name == "" {
		return object{}, errors.New("decode object: no metadata.name")
	}
	o := object{namespace: h.Metadata.Namespace, name: h.Metadata.Name, contentType: mediaJSON}
	raw = bytes.TrimSpace(raw)
	if (h.APIVersion == "" || h.Kind == "") && len(raw) > 1 && raw[0] == '{' {
		var b bytes.Buffer
		b.Grow(len(raw) + len(apiVersion) + len(kind) + 32)
		b.WriteByte('{')
		if h.APIVersion == "" {
			av, _ := json.Marshal(apiVersion)
			b.WriteString(`"apiVersion":`)
			b.Write(av)
			b.WriteByte(',')
		}
		if h.Kind == "" {
			k, _ := json.Marshal(kind)
			b.WriteString(`"kind":`)
			b.Write(k)
			b.WriteByte(',')
		}
		rest := bytes.TrimSpace(raw[1:])
		if len(rest) > 0 && rest[0] == '}' { // {} : drop the trailing comma
			b.Truncate(b.Len() - 1)
		}
		b.Write(rest)
		o.body = b.Bytes()
	} else {
		o.body = append([]byte(nil), raw...)
	}
	return o, nil
}

// objectsAfter returns the objects whose key sorts after lastKey: what is
// left to do of a list started again from the beginning after objects up
// to lastKey were done. objects are in list order.
func objectsAfter(objs []object, lastKey string) []object {
	if lastKey == "" {
		return objs
	}
	for i, o := range objs {
		if o.key() > lastKey {
			return objs[i:]
		}
	}
	return nil
}

// listFunc sends one list request with a continue token ("" for the
// first chunk).
type listFunc func(ctx context.Context, token string) (page, error)

// lister walks a resource's list chunk by chunk from a saved position,
// and gets past an expired continue token.
//
// An expired token (410 Gone: etcd compacted the revision the list
// started at, which happens every five minutes) ends a consistent list.
// kube-apiserver then offers a token that continues after the same key at
// the current revision (an "inconsistent" continuation); the lister uses
// it. When there is none, it lists again from the beginning and drops
// every object whose key sorts at or before the last key it handed out,
// which relies on lists being in key order (see objectKey). Either way an
// object created meanwhile before that key is not listed; it was written
// in the current storage version anyway.
//
// A lister has no lock: it belongs to the lister goroutine of a resource's
// migration, which hands what it listed to the others through a channel.
type lister struct {
	list  listFunc
	token string
	// lastKey is the key of the last object handed out (or, when resuming,
	// of the last one done).
	lastKey string
	// skipping is set when the list started again from the beginning: the
	// objects up to lastKey are dropped.
	skipping bool
	done     bool
	// restarts counts expired tokens; fromStart those without a
	// continuation offered.
	restarts, fromStart int64
}

// newLister continues a list at token (the saved continue token; "" with
// an empty lastKey to start at the beginning). A resumed list with no
// token but a lastKey starts again from the beginning, skipping.
func newLister(list listFunc, token, lastKey string) *lister {
	l := &lister{list: list, token: token, lastKey: lastKey}
	if token == "" && lastKey != "" {
		l.skipping = true
	}
	return l
}

// next returns the next chunk's objects and the continue token after
// them ("" after the last chunk, when done is then true). remaining is
// the server's count of objects after the chunk, -1 when unknown.
func (l *lister) next(ctx context.Context) (objs []object, token string, remaining int64, err error) {
	if l.done {
		return nil, "", 0, errors.New("list already complete")
	}
	for {
		p, err := l.list(ctx, l.token)
		if out, _ := Classify(err); out == Expired && l.token != "" {
			l.restarts++
			var st apierrors.APIStatus
			if errors.As(err, &st) && st.Status().ListMeta.Continue != "" {
				l.token = st.Status().ListMeta.Continue
			} else {
				l.token = ""
				l.fromStart++
			}
			l.skipping = true
			continue
		}
		if err != nil {
			return nil, "", 0, err
		}
		objs = p.objects
		if l.skipping {
			objs = objectsAfter(objs, l.lastKey)
			if len(objs) > 0 {
				l.skipping = false
			}
		}
		if n := len(objs); n > 0 {
			l.lastKey = objs[n-1].key()
		}
		l.token = p.next
		l.done = p.next == ""
		return objs, p.next, p.remaining, nil
	}
}
