package workload

// The linearizability checker: concurrent clients doing puts, linearizable
// gets and compare-and-swaps over a few keys, their history checked
// against a sequential register model with porcupine (the checker etcd's
// robustness tests use).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/status"
)

// OpKind names a register operation.
type OpKind string

// The operations of the register model.
const (
	OpPut OpKind = "put" // write a value
	OpGet OpKind = "get" // read the value (linearizable read)
	OpCAS OpKind = "cas" // write a value if the register holds the expected one
)

// RegInput is an operation's call: the key, and for put and cas the value
// written, for cas the value expected ("" is the absent key).
type RegInput struct {
	Op     OpKind
	Key    string
	Value  string
	Expect string
}

// RegOutput is an operation's outcome. Unknown: the client got an error
// after the request may have reached etcd (a timeout, a broken
// connection): the operation may or may not have taken effect. Otherwise
// Value is what a get read, or what a failed cas found instead of its
// expected value ("" for the absent key), and OK whether a cas swapped.
type RegOutput struct {
	Unknown bool
	OK      bool
	Value   string
}

// RegisterModel is the sequential specification the history is checked
// against: one register per key (histories are partitioned by key), each
// holding a string, "" when the key is absent. Values written are unique,
// so a read names the write it saw.
//
//   - put v: always possible; the register holds v.
//   - get: possible only if it returned what the register holds.
//   - cas e→v: succeeded only if the register held e (it then holds v);
//     failed only if it held something else, and then what the failure
//     reported (the transaction's else branch reads the key).
//
// An unknown outcome (the client gave up) is possible in any state: its
// return time is set past the end of the history, so the checker may place
// it anywhere after its call, last of all included, which is the same as
// never applied. A put of unknown outcome writes its value; a cas of
// unknown outcome swaps if the register holds the expected value.
var RegisterModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(RegInput).Key
			byKey[k] = append(byKey[k], op)
		}
		var parts [][]porcupine.Operation
		for _, k := range slices.Sorted(maps.Keys(byKey)) {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(string), input.(RegInput), output.(RegOutput)
		switch in.Op {
		case OpPut:
			return true, in.Value
		case OpGet:
			return out.Unknown || out.Value == st, st
		case OpCAS:
			if out.Unknown {
				if st == in.Expect {
					return true, in.Value
				}
				return true, st
			}
			if out.OK {
				return st == in.Expect, in.Value
			}
			return st != in.Expect && st == out.Value, st
		}
		return false, st
	},
	Equal: func(a, b any) bool { return a.(string) == b.(string) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(RegInput), output.(RegOutput)
		var res string
		switch {
		case out.Unknown:
			res = "unknown"
		case in.Op == OpPut:
			res = "ok"
		case in.Op == OpGet:
			res = quote(out.Value)
		case out.OK:
			res = "swapped"
		default:
			res = "failed, found " + quote(out.Value)
		}
		switch in.Op {
		case OpPut:
			return fmt.Sprintf("put(%s, %s) -> %s", in.Key, quote(in.Value), res)
		case OpGet:
			return fmt.Sprintf("get(%s) -> %s", in.Key, res)
		default:
			return fmt.Sprintf("cas(%s, %s -> %s) -> %s", in.Key, quote(in.Expect), quote(in.Value), res)
		}
	},
	DescribeState: func(state any) string { return quote(state.(string)) },
}

func quote(v string) string {
	if v == "" {
		return "absent"
	}
	return "'" + v + "'"
}

// LinOptions shape a linearizability workload. Only Prefix is required.
type LinOptions struct {
	// Prefix names the keys: Prefix/k0 ... Prefix/k(Keys-1). Use a fresh
	// prefix per run: the model starts with every key absent.
	Prefix string
	// Keys is how many keys the clients share (default 3): few keys, many
	// operations on each, so concurrent operations meet.
	Keys int
	// Interval paces each client: at most one operation started per
	// Interval (default 10 ms; keeps the history small enough to check).
	Interval time.Duration
	// Timeout bounds each request (default 3 s); a request that times out
	// has an unknown outcome.
	Timeout time.Duration
	// RetryOnce lists error texts (substrings) after which a client retries
	// the operation once, as an application following docs/upgrades.md's
	// client advice would. The operation is recorded once, from the first
	// call to the last return. Empty: no retries (clientv3's own only).
	RetryOnce []string
}

func (o LinOptions) withDefaults() LinOptions {
	if o.Keys <= 0 {
		o.Keys = 3
	}
	if o.Interval <= 0 {
		o.Interval = 10 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 3 * time.Second
	}
	return o
}

// LinOp is one recorded operation. Times are offsets from the run's start.
type LinOp struct {
	Client   int
	Input    RegInput
	Output   RegOutput
	Call     time.Duration
	Return   time.Duration // for an unknown outcome, when the client gave up
	Attempts int
	Err      error // the last attempt's error; nil when etcd answered
	// Retried is the error after which the operation was tried again
	// (LinOptions.RetryOnce); nil when it was not.
	Retried error
}

// LinChecker runs clients doing puts, linearizable gets and
// compare-and-swaps until Stop. Start it with StartLinearizable.
type LinChecker struct {
	// Set by StartLinearizable, read-only afterwards.
	opts    LinOptions
	start   time.Time
	quit    chan struct{} // closed by Stop (under stopOnce)
	clients sync.WaitGroup

	// mu guards ops: the clients append, Count and Stop read.
	mu  sync.Mutex
	ops []LinOp

	// stopOnce makes Stop idempotent; result is written inside it and read
	// only after it.
	stopOnce sync.Once
	result   *LinResult
}

// StartLinearizable starts one client goroutine per kv (give each its own
// *clientv3.Client dialling every member, so that each picks its endpoint
// and fails over as a real application does). The clients stop with the
// test (tb.Context, and a cleanup calls Stop).
func StartLinearizable(tb testing.TB, kvs []clientv3.KV, opts LinOptions) *LinChecker {
	tb.Helper()
	if opts.Prefix == "" || len(kvs) == 0 {
		tb.Fatal("workload.StartLinearizable: a Prefix and at least one client are required")
	}
	c := &LinChecker{opts: opts.withDefaults(), start: time.Now(), quit: make(chan struct{})}
	ctx := tb.Context()
	for i, kv := range kvs {
		c.clients.Add(1)
		go c.run(ctx, i, kv)
	}
	tb.Cleanup(func() { c.Stop() })
	return c
}

func (c *LinChecker) run(ctx context.Context, id int, kv clientv3.KV) {
	defer c.clients.Done()
	rng := rand.New(rand.NewPCG(uint64(id), uint64(c.start.UnixNano())))
	last := make([]string, c.opts.Keys) // the newest value this client saw per key
	t := time.NewTicker(c.opts.Interval)
	defer t.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-c.quit:
			return
		case <-t.C:
		}
		k := rng.IntN(c.opts.Keys)
		in := RegInput{Key: fmt.Sprintf("%s/k%d", c.opts.Prefix, k)}
		switch r := rng.IntN(10); {
		case r < 4:
			in.Op = OpGet
		case r < 7:
			in.Op, in.Value = OpPut, fmt.Sprintf("c%d-%d", id, seq)
		default:
			in.Op, in.Value, in.Expect = OpCAS, fmt.Sprintf("c%d-%d", id, seq), last[k]
		}
		op := c.do(ctx, kv, id, in)
		switch {
		case op.Output.Unknown:
		case op.Input.Op == OpGet || op.Input.Op == OpCAS && !op.Output.OK:
			last[k] = op.Output.Value
		default:
			last[k] = op.Input.Value
		}
		if ctx.Err() != nil && op.Err != nil {
			return // the test ended: the error is ours, not etcd's
		}
		c.mu.Lock()
		c.ops = append(c.ops, op)
		c.mu.Unlock()
	}
}

// do runs one operation, with the retries LinOptions.RetryOnce allows.
func (c *LinChecker) do(ctx context.Context, kv clientv3.KV, id int, in RegInput) LinOp {
	op := LinOp{Client: id, Input: in, Call: time.Since(c.start)}
	for {
		op.Attempts++
		op.Output, op.Err = c.attempt(ctx, kv, in)
		op.Return = time.Since(c.start)
		if op.Err == nil || op.Attempts > 1 || !c.retriable(op.Err) {
			return op
		}
		op.Retried = op.Err
	}
}

func (c *LinChecker) retriable(err error) bool {
	msg := err.Error()
	for _, s := range c.opts.RetryOnce {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func (c *LinChecker) attempt(ctx context.Context, kv clientv3.KV, in RegInput) (RegOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	switch in.Op {
	case OpGet:
		r, err := kv.Get(ctx, in.Key)
		if err != nil {
			return RegOutput{Unknown: true}, err
		}
		if len(r.Kvs) == 0 {
			return RegOutput{}, nil
		}
		return RegOutput{Value: string(r.Kvs[0].Value)}, nil
	case OpPut:
		if _, err := kv.Put(ctx, in.Key, in.Value); err != nil {
			return RegOutput{Unknown: true}, err
		}
		return RegOutput{}, nil
	default:
		cmp := clientv3.Compare(clientv3.Value(in.Key), "=", in.Expect)
		if in.Expect == "" {
			cmp = clientv3.Compare(clientv3.CreateRevision(in.Key), "=", 0) // absent
		}
		r, err := kv.Txn(ctx).If(cmp).Then(clientv3.OpPut(in.Key, in.Value)).Else(clientv3.OpGet(in.Key)).Commit()
		if err != nil {
			return RegOutput{Unknown: true}, err
		}
		if r.Succeeded {
			return RegOutput{OK: true}, nil
		}
		out := RegOutput{}
		if rr := r.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
			out.Value = string(rr.Kvs[0].Value)
		}
		return out, nil
	}
}

// Count returns how many operations have returned so far.
func (c *LinChecker) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ops)
}

// Stop stops the clients, waits for their operations to return and
// returns the history.
func (c *LinChecker) Stop() *LinResult {
	c.stopOnce.Do(func() {
		close(c.quit)
		c.clients.Wait()
		c.mu.Lock()
		ops := slices.Clone(c.ops)
		c.mu.Unlock()
		slices.SortFunc(ops, func(a, b LinOp) int { return cmp.Compare(a.Call, b.Call) })
		c.result = &LinResult{Ops: ops, Took: time.Since(c.start)}
	})
	return c.result
}

// LinResult is a checker's history.
type LinResult struct {
	Ops  []LinOp       // by call time
	Took time.Duration // from start to stop
}

// ErrorKind names an error for counting: its gRPC code and etcd's
// description ("Unavailable: etcdserver: leader changed"), or the
// client's own timeout ("DeadlineExceeded: client timeout") or error.
func ErrorKind(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "DeadlineExceeded: client timeout"
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) { // clientv3 turns etcd's own errors into these
		return ee.Code().String() + ": " + ee.Error()
	}
	if s, ok := status.FromError(err); ok {
		return s.Code().String() + ": " + rpctypes.ErrorDesc(err)
	}
	return err.Error()
}

// Errors counts the failed operations (after their retries) by ErrorKind
// of their last error and, separately, the retried ones by ErrorKind of
// the error that made the client retry, and whether the retry succeeded
// ("KIND, then ok" or "KIND, then failed").
func (r *LinResult) Errors() (failed, retried map[string]int) {
	failed, retried = map[string]int{}, map[string]int{}
	for _, op := range r.Ops {
		if op.Err != nil {
			failed[ErrorKind(op.Err)]++
		}
		if op.Retried != nil {
			then := "ok"
			if op.Err != nil {
				then = "failed"
			}
			retried[fmt.Sprintf("%s %s, then %s", op.Input.Op, ErrorKind(op.Retried), then)]++
		}
	}
	return failed, retried
}

// Failed returns how many operations ended with an error.
func (r *LinResult) Failed() int {
	n := 0
	for _, op := range r.Ops {
		if op.Err != nil {
			n++
		}
	}
	return n
}

// FailedWrites returns how many puts and compare-and-swaps ended with an
// error (reads left out).
func (r *LinResult) FailedWrites() int {
	n := 0
	for _, op := range r.Ops {
		if op.Err != nil && op.Input.Op != OpGet {
			n++
		}
	}
	return n
}

// LongestStall is the longest stretch in which no operation succeeded:
// between two successive successful returns, or from the start to the
// first one. Reads count: a stretch of failed reads is a stall too.
func (r *LinResult) LongestStall() time.Duration {
	var rets []time.Duration
	for _, op := range r.Ops {
		if op.Err == nil {
			rets = append(rets, op.Return)
		}
	}
	slices.Sort(rets)
	var prev, longest time.Duration
	for _, t := range rets {
		longest = max(longest, t-prev)
		prev = t
	}
	return max(longest, r.Took-prev)
}

// History returns the porcupine history: every operation etcd answered,
// and every put and cas of unknown outcome with its return moved past the
// end of the history. Unknown gets tell nothing and are left out.
func (r *LinResult) History() []porcupine.Operation {
	var end int64
	for _, op := range r.Ops {
		end = max(end, int64(op.Return))
	}
	h := make([]porcupine.Operation, 0, len(r.Ops))
	for _, op := range r.Ops {
		ret := int64(op.Return)
		if op.Output.Unknown {
			if op.Input.Op == OpGet {
				continue
			}
			end++
			ret = end
		}
		h = append(h, porcupine.Operation{ClientId: op.Client, Input: op.Input, Output: op.Output, Call: int64(op.Call), Return: ret})
	}
	return h
}

// String summarises the history: operations by kind and outcome.
func (r *LinResult) String() string {
	ok, unknown, swapped := 0, 0, 0
	for _, op := range r.Ops {
		switch {
		case op.Output.Unknown:
			unknown++
		default:
			ok++
			if op.Input.Op == OpCAS && op.Output.OK {
				swapped++
			}
		}
	}
	return fmt.Sprintf("%d operations in %s: %d answered (%d successful cas), %d of unknown outcome; longest stall %s",
		len(r.Ops), r.Took.Round(100*time.Millisecond), ok, swapped, unknown, r.LongestStall().Round(time.Millisecond))
}

// CheckTimeout bounds porcupine's search per check. Histories of a few
// minutes at the default pace check in seconds; a check that runs out of
// time fails the test as unproven rather than passing it.
var CheckTimeout = 2 * time.Minute

// Check checks a history against RegisterModel, within CheckTimeout.
func Check(h []porcupine.Operation) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(RegisterModel, h, CheckTimeout)
}

// Visualize writes porcupine's HTML visualization of a checked history
// (its partial linearizations and where they fail) as dir/name.html and
// returns its path.
func Visualize(info porcupine.LinearizationInfo, dir, name string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("linearizability visualization: %w", err)
	}
	path := filepath.Join(dir, name+".html")
	if err := porcupine.VisualizePath(RegisterModel, info, path); err != nil {
		return "", fmt.Errorf("linearizability visualization: %w", err)
	}
	return path, nil
}

// RequireLinearizable fails the test unless the history is linearizable.
// A check that runs out of time fails it too (unproven). On failure
// porcupine's visualization is written to the test's artifact directory
// (t.ArtifactDir: kept under -outputdir when go test runs with -artifacts,
// as `make test` does; otherwise removed with the test) and its path
// logged.
func RequireLinearizable(t testing.TB, what string, r *LinResult) {
	t.Helper()
	h := r.History()
	started := time.Now()
	res, info := Check(h)
	took := time.Since(started).Round(time.Millisecond)
	if res == porcupine.Ok {
		t.Logf("%s: linearizable: %s (checked in %s)", what, r, took)
		return
	}
	path, err := Visualize(info, t.ArtifactDir(), strings.NewReplacer("/", "-", " ", "-").Replace(what))
	if err != nil {
		t.Error(err)
	}
	if res == porcupine.Illegal {
		t.Errorf("%s: NOT linearizable: %s; porcupine's visualization: %s", what, r, path)
		return
	}
	t.Errorf("%s: the linearizability check ran out of time after %s (%d operations): unproven; visualization: %s", what, took, len(h), path)
}
