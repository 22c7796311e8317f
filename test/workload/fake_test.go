package workload_test

import (
	"bytes"
	"context"
	"sort"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fakeKV is an in-memory etcd keyspace with revisions and history, enough
// for the writer (Put, Txn of puts) and the digest (Get of a key, a prefix
// or from a key, at a revision). fail, when set, decides each write
// attempt's fate before it is applied: an error fails it. Its methods are
// safe for concurrent use (mu guards everything).
type fakeKV struct {
	clientv3.KV // nil: any other method panics

	mu       sync.Mutex
	rev      int64
	hist     map[string][]mvccpb.KeyValue // every version of each key, oldest first; Value nil and Version 0: deleted
	attempts map[string]int               // write attempts per first key
	puts     int                          // applied write requests
	fail     func(key string, attempt int) error
}

func newFakeKV() *fakeKV {
	return &fakeKV{rev: 1, hist: map[string][]mvccpb.KeyValue{}, attempts: map[string]int{}}
}

// apply applies one write request of keys (one revision) after fail lets
// it through; lease is each key's lease.
func (f *fakeKV) apply(keys []string, value string, lease int64) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts[keys[0]]++
	if f.fail != nil {
		if err := f.fail(keys[0], f.attempts[keys[0]]); err != nil {
			return 0, err
		}
	}
	f.rev++
	f.puts++
	for _, k := range keys {
		kv := mvccpb.KeyValue{Key: []byte(k), Value: []byte(value), ModRevision: f.rev, CreateRevision: f.rev, Version: 1, Lease: lease}
		if h := f.hist[k]; len(h) > 0 && h[len(h)-1].Version > 0 {
			kv.CreateRevision, kv.Version = h[len(h)-1].CreateRevision, h[len(h)-1].Version+1
		}
		f.hist[k] = append(f.hist[k], kv)
	}
	return f.rev, nil
}

// remove deletes a key (a lost write, as far as a reader can tell).
func (f *fakeKV) remove(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	f.hist[key] = append(f.hist[key], mvccpb.KeyValue{Key: []byte(key), ModRevision: f.rev})
}

// tried returns how many writes were attempted (distinct first keys).
func (f *fakeKV) tried() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.attempts)
}

func (f *fakeKV) applied() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.puts
}

func (f *fakeKV) Put(ctx context.Context, key, val string, _ ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rev, err := f.apply([]string{key}, val, 0)
	if err != nil {
		return nil, err
	}
	return &clientv3.PutResponse{Header: &pb.ResponseHeader{Revision: rev}}, nil
}

func (f *fakeKV) Txn(ctx context.Context) clientv3.Txn { return &fakeTxn{f: f, ctx: ctx} }

type fakeTxn struct {
	f   *fakeKV
	ctx context.Context
	ops []clientv3.Op
}

func (t *fakeTxn) If(...clientv3.Cmp) clientv3.Txn      { panic("fakeKV: If is not supported") }
func (t *fakeTxn) Else(...clientv3.Op) clientv3.Txn     { panic("fakeKV: Else is not supported") }
func (t *fakeTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.ops = append(t.ops, ops...); return t }

func (t *fakeTxn) Commit() (*clientv3.TxnResponse, error) {
	if err := t.ctx.Err(); err != nil {
		return nil, err
	}
	var keys []string
	var val string
	for _, op := range t.ops {
		if !op.IsPut() {
			panic("fakeKV: only puts in transactions")
		}
		keys = append(keys, string(op.KeyBytes()))
		val = string(op.ValueBytes())
	}
	rev, err := t.f.apply(keys, val, 0)
	if err != nil {
		return nil, err
	}
	return &clientv3.TxnResponse{Header: &pb.ResponseHeader{Revision: rev}, Succeeded: true}, nil
}

func (f *fakeKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	op := clientv3.OpGet(key, opts...)
	f.mu.Lock()
	defer f.mu.Unlock()
	at := op.Rev()
	if at <= 0 {
		at = f.rev
	}
	from, end := op.KeyBytes(), op.RangeBytes()
	in := func(k []byte) bool {
		switch {
		case len(end) == 0:
			return bytes.Equal(k, from)
		case bytes.Equal(end, []byte{0}):
			return bytes.Compare(k, from) >= 0
		default:
			return bytes.Compare(k, from) >= 0 && bytes.Compare(k, end) < 0
		}
	}
	resp := &clientv3.GetResponse{Header: &pb.ResponseHeader{Revision: f.rev}}
	for k, h := range f.hist {
		if !in([]byte(k)) {
			continue
		}
		var cur *mvccpb.KeyValue
		for i := range h {
			if h[i].ModRevision <= at {
				cur = &h[i]
			}
		}
		if cur == nil || cur.Version == 0 {
			continue
		}
		kv := *cur
		if op.IsKeysOnly() {
			kv.Value = nil
		}
		resp.Kvs = append(resp.Kvs, &kv)
	}
	sort.Slice(resp.Kvs, func(i, j int) bool { return bytes.Compare(resp.Kvs[i].Key, resp.Kvs[j].Key) < 0 })
	resp.Count = int64(len(resp.Kvs))
	return resp, nil
}
