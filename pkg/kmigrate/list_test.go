package kmigrate

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// TestObjectKeyOrder: objectKey orders objects exactly as etcd orders
// their keys, for namespace and object names made of every character
// Kubernetes allows (lower-case letters, digits, "-" and "."), across
// namespaces whose names are prefixes of one another.
func TestObjectKeyOrder(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	alphabet := "abz09-."
	name := func() string {
		b := make([]byte, 1+rnd.Intn(4))
		for i := range b {
			b[i] = alphabet[rnd.Intn(len(alphabet))]
		}
		return string(b)
	}
	type obj struct{ ns, name string }
	var objs []obj
	for i := 0; i < 3000; i++ {
		objs = append(objs, obj{name(), name()})
	}
	objs = append(objs, obj{"a", "z"}, obj{"a-b", "x"}, obj{"a.b", "x"}, obj{"ab", "a"}, obj{"a", "a-b"}, obj{"a", "a"})
	for _, namespaced := range []bool{true, false} {
		etcdKey := func(o obj) string {
			if namespaced {
				return "/registry/configmaps/" + o.ns + "/" + o.name
			}
			return "/registry/namespaces/" + o.name
		}
		key := func(o obj) string {
			if namespaced {
				return objectKey(o.ns, o.name)
			}
			return objectKey("", o.name)
		}
		sort.Slice(objs, func(i, j int) bool { return etcdKey(objs[i]) < etcdKey(objs[j]) })
		for i := 1; i < len(objs); i++ {
			if key(objs[i-1]) > key(objs[i]) {
				t.Fatalf("namespaced %v: etcd lists %q before %q, objectKey sorts %q after %q",
					namespaced, etcdKey(objs[i-1]), etcdKey(objs[i]), key(objs[i-1]), key(objs[i]))
			}
		}
	}
	// The case that makes "by namespace, then by name" wrong.
	if !(objectKey("a-b", "x") < objectKey("a", "z")) {
		t.Error(`objectKey("a-b", "x") must sort before objectKey("a", "z"), as etcd sorts their keys`)
	}
}

func TestDecodePage(t *testing.T) {
	body := `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"77","continue":"tok","remainingItemCount":1234},
	"items":[
	  {"metadata":{"name":"a","namespace":"ns","resourceVersion":"5"},"data":{"k":"v"}},
	  {"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b","namespace":"ns"}},
	  {"metadata":{"name":"c"}}
	]}`
	p, err := decodePage([]byte(body), mediaJSON)
	if err != nil {
		t.Fatal(err)
	}
	if p.next != "tok" || p.remaining != 1234 || len(p.objects) != 3 || p.lastKey != "c" {
		t.Fatalf("page %+v", p)
	}
	for i, want := range []struct{ ns, name, av, kind, rv string }{{"ns", "a", "v1", "ConfigMap", "5"}, {"ns", "b", "v1", "ConfigMap", ""}, {"", "c", "v1", "ConfigMap", ""}} {
		o := p.objects[i]
		var got struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name, Namespace, ResourceVersion string
			} `json:"metadata"`
			Data map[string]string `json:"data"`
		}
		// A strict decoder: no duplicated field.
		dec := json.NewDecoder(strings.NewReader(string(o.body)))
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("object %d: %v: %s", i, err, o.body)
		}
		if o.namespace != want.ns || o.name != want.name || got.APIVersion != want.av || got.Kind != want.kind ||
			got.Metadata.Name != want.name || got.Metadata.ResourceVersion != want.rv || strings.Count(string(o.body), `"kind"`) != 1 {
			t.Errorf("object %d: %+v %s", i, o, o.body)
		}
	}
	if d := p.objects[0]; !strings.Contains(string(d.body), `"data":{"k":"v"}`) {
		t.Errorf("data lost: %s", d.body)
	}
	// The last page: no continue token, no count.
	p, err = decodePage([]byte(`{"kind":"NamespaceList","apiVersion":"v1","metadata":{},"items":[]}`), mediaJSON)
	if err != nil || p.next != "" || p.remaining != -1 || len(p.objects) != 0 || p.lastKey != "" {
		t.Errorf("empty page %+v, %v", p, err)
	}
	if _, err := decodePage([]byte(`{"items":[{"metadata":{}}]}`), mediaJSON); err == nil {
		t.Error("an object without a name was accepted")
	}
	if o, err := prepare([]byte(`{}`), "v1", "Thing"); err == nil {
		t.Errorf("object without metadata accepted: %s", o.body)
	}
	if o, err := prepare([]byte(` {"metadata":{"name":"x"}} `), "example.com/v1", "Widget"); err != nil ||
		string(o.body) != `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"x"}}` {
		t.Errorf("prepare: %s, %v", o.body, err)
	}
}

func TestObjectsAfter(t *testing.T) {
	objs := []object{{namespace: "a-b", name: "x"}, {namespace: "a", name: "a"}, {namespace: "a", name: "z"}, {namespace: "b", name: "a"}}
	keys := func(os []object) string {
		var k []string
		for _, o := range os {
			k = append(k, o.key())
		}
		return strings.Join(k, " ")
	}
	for last, want := range map[string]string{
		"":      "a-b/x a/a a/z b/a",
		"a-b/x": "a/a a/z b/a",
		"a-a/z": "a-b/x a/a a/z b/a",
		"a/m":   "a/z b/a",
		"a/z":   "b/a",
		"b/a":   "",
		"c/a":   "",
	} {
		if got := keys(objectsAfter(objs, last)); got != want {
			t.Errorf("after %q: %q, want %q", last, got, want)
		}
	}
}

// listServer is a pure function of a sorted set of keys, standing for
// the API server's chunked list: a token names the last key returned, and
// tokens issued before the set's "compaction" generation are expired.
type listServer struct {
	keys         []string // sorted
	gen          int      // tokens of older generations are expired
	inconsistent bool     // an expired token's error carries a continuation
	calls        []string
}

func (s *listServer) token(last string) string {
	return base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("%d\x00%s", s.gen, last)))
}

func (s *listServer) list(limit int) listFunc {
	return func(_ context.Context, token string) (page, error) {
		s.calls = append(s.calls, token)
		after := ""
		if token != "" {
			b, _ := base64.StdEncoding.DecodeString(token)
			var gen int
			parts := strings.SplitN(string(b), "\x00", 2)
			fmt.Sscan(parts[0], &gen)
			after = parts[1]
			if gen < s.gen {
				err := apierrors.NewResourceExpired("The provided continue parameter is too old")
				if s.inconsistent {
					err.ErrStatus.ListMeta.Continue = s.token(after)
				}
				return page{}, err
			}
		}
		i := sort.SearchStrings(s.keys, after)
		for i < len(s.keys) && s.keys[i] <= after {
			i++
		}
		var p page
		for ; i < len(s.keys) && len(p.objects) < limit; i++ {
			ns, name, _ := strings.Cut(s.keys[i], "/")
			p.objects = append(p.objects, object{namespace: ns, name: name})
		}
		p.remaining = int64(len(s.keys) - i)
		if n := len(p.objects); n > 0 {
			p.lastKey = p.objects[n-1].key()
		}
		if i < len(s.keys) {
			p.next = s.token(p.lastKey)
		}
		return p, nil
	}
}

func (s *listServer) add(keys ...string) {
	s.keys = append(s.keys, keys...)
	sort.Strings(s.keys)
}

// drain runs a lister to its end (at most max chunks), calling between
// (when set) after each chunk, and returns every key handed out.
func drain(t *testing.T, l *lister, between func(n int)) []string {
	t.Helper()
	var got []string
	for n := 1; !l.done; n++ {
		objs, tok, _, err := l.next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if (tok == "") != l.done {
			t.Fatalf("token %q but done %v", tok, l.done)
		}
		for _, o := range objs {
			got = append(got, o.key())
		}
		if between != nil {
			between(n)
		}
		if n > 1000 {
			t.Fatal("the list does not end")
		}
	}
	return got
}

func keyRange(prefix string, from, to int) []string {
	var k []string
	for i := from; i < to; i++ {
		k = append(k, fmt.Sprintf("%s/cm-%04d", prefix, i))
	}
	return k
}

// TestListerExpiredToken: a continue token that expires mid-list (410)
// neither loses nor repeats an object, whether the server offers an
// inconsistent continuation or the list starts again from the beginning
// and skips what was done; and a run resumed from a saved token and last
// key does the same after an expiry.
func TestListerExpiredToken(t *testing.T) {
	base := append(append(keyRange("ns-a", 0, 120), keyRange("ns-a-b", 0, 40)...), keyRange("ns-b", 0, 90)...)
	sorted := func(k []string) []string { k = append([]string(nil), k...); sort.Strings(k); return k }

	for _, inconsistent := range []bool{false, true} {
		t.Run(fmt.Sprintf("inconsistent=%v", inconsistent), func(t *testing.T) {
			s := &listServer{inconsistent: inconsistent}
			s.add(base...)
			l := newLister(s.list(50), "", "")
			var created []string
			got := drain(t, l, func(n int) {
				if n == 2 { // etcd compacts: the token expires
					s.gen++
					// Objects created meanwhile: one before the position
					// (created in the current version: not needed), two
					// after it (needed).
					created = []string{"ns-a/cm-9999", "ns-b/zz-new"}
					s.add("ns-a/aa-early", "ns-a/cm-9999", "ns-b/zz-new")
				}
			})
			want := sorted(append(append([]string(nil), base...), created...))
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("handed out %d objects, want %d:\n got %v\nwant %v", len(got), len(want), got, want)
			}
			if l.restarts != 1 {
				t.Errorf("restarts %d, want 1", l.restarts)
			}
			if inconsistent != (l.fromStart == 0) {
				t.Errorf("fromStart %d with inconsistent continuation %v", l.fromStart, inconsistent)
			}
			if !inconsistent && s.calls[3] != "" {
				t.Errorf("the list did not start again from the beginning: calls %q", s.calls)
			}
		})
	}

	t.Run("resumed", func(t *testing.T) {
		s := &listServer{}
		s.add(base...)
		// A first process did two chunks, then was killed; its saved
		// token expired before the second process started.
		first := newLister(s.list(50), "", "")
		var done []string
		for i := 0; i < 2; i++ {
			objs, _, _, err := first.next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				done = append(done, o.key())
			}
		}
		savedToken, savedKey := first.token, first.lastKey
		s.gen++
		l := newLister(s.list(50), savedToken, savedKey)
		got := drain(t, l, nil)
		if all := append(done, got...); strings.Join(all, " ") != strings.Join(sorted(base), " ") {
			t.Errorf("before the kill %d, after %d objects; want each of %d once", len(done), len(got), len(base))
		}
		if l.restarts != 1 || l.fromStart != 1 {
			t.Errorf("restarts %d from start %d", l.restarts, l.fromStart)
		}
		// Without a token (saved before the first chunk was listed, or
		// lost) the last key alone is enough.
		l = newLister(s.list(50), "", savedKey)
		got = drain(t, l, nil)
		if len(got) != len(base)-len(done) || got[0] <= savedKey {
			t.Errorf("from the last key alone: %d objects from %q", len(got), got[0])
		}
	})

	t.Run("fresh list cannot expire", func(t *testing.T) {
		l := newLister(func(context.Context, string) (page, error) { return page{}, apierrors.NewResourceExpired("x") }, "", "")
		if _, _, _, err := l.next(context.Background()); !apierrors.IsResourceExpired(err) {
			t.Errorf("err %v", err)
		}
	})
}
