package workload_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/etcd-steward/steward/test/workload"
)

// op builds a history entry: client c called at call and returned at ret
// (ret < 0: unknown outcome, given up at -ret).
func op(c int, in workload.RegInput, out workload.RegOutput, call, ret time.Duration) workload.LinOp {
	o := workload.LinOp{Client: c, Input: in, Output: out, Call: call, Return: ret, Attempts: 1}
	if ret < 0 {
		o.Return, o.Output, o.Err = -ret, workload.RegOutput{Unknown: true}, context.DeadlineExceeded
	}
	return o
}

func put(k, v string) workload.RegInput {
	return workload.RegInput{Op: workload.OpPut, Key: k, Value: v}
}
func get(k string) workload.RegInput { return workload.RegInput{Op: workload.OpGet, Key: k} }
func cas(k, e, v string) workload.RegInput {
	return workload.RegInput{Op: workload.OpCAS, Key: k, Expect: e, Value: v}
}

var (
	ok      = workload.RegOutput{}
	swapped = workload.RegOutput{OK: true}
)

func read(v string) workload.RegOutput { return workload.RegOutput{Value: v} }

// TestRegisterModel checks hand-made histories, each linearizable or not
// by construction, against the model, and writes porcupine's visualization
// of each.
func TestRegisterModel(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		ops  []workload.LinOp
		want porcupine.CheckResult
	}{
		{"sequential put get cas", []workload.LinOp{
			op(0, get("a"), read(""), 0, 1*ms),
			op(0, put("a", "x"), ok, 2*ms, 3*ms),
			op(1, get("a"), read("x"), 4*ms, 5*ms),
			op(1, cas("a", "x", "y"), swapped, 6*ms, 7*ms),
			op(0, cas("a", "x", "z"), read("y"), 8*ms, 9*ms),
			op(0, get("a"), read("y"), 10*ms, 11*ms),
		}, porcupine.Ok},
		{"concurrent writes, reads in either order", []workload.LinOp{
			op(0, put("a", "x"), ok, 0, 10*ms),
			op(1, put("a", "y"), ok, 1*ms, 9*ms),
			op(2, get("a"), read("y"), 2*ms, 3*ms),
			op(2, get("a"), read("x"), 4*ms, 5*ms),
		}, porcupine.Ok},
		{"unknown put seen later", []workload.LinOp{
			op(0, put("a", "x"), ok, 0, 1*ms),
			op(1, put("a", "y"), ok, 2*ms, -3*ms),
			op(0, get("a"), read("x"), 4*ms, 5*ms),
			op(0, get("a"), read("y"), 6*ms, 7*ms),
		}, porcupine.Ok},
		{"unknown put never applied", []workload.LinOp{
			op(0, put("a", "x"), ok, 0, 1*ms),
			op(1, put("a", "y"), ok, 2*ms, -3*ms),
			op(0, get("a"), read("x"), 4*ms, 5*ms),
		}, porcupine.Ok},
		{"keys independent", []workload.LinOp{
			op(0, put("a", "x"), ok, 0, 1*ms),
			op(1, get("b"), read(""), 2*ms, 3*ms),
			op(1, get("a"), read("x"), 4*ms, 5*ms),
		}, porcupine.Ok},
		{"stale read", []workload.LinOp{
			op(0, put("a", "x"), ok, 0, 1*ms),
			op(0, put("a", "y"), ok, 2*ms, 3*ms),
			op(1, get("a"), read("x"), 4*ms, 5*ms),
		}, porcupine.Illegal},
		{"read of a value never written", []workload.LinOp{
			op(0, put("a", "x"), ok, 0, 1*ms),
			op(1, get("a"), read("w"), 2*ms, 3*ms),
		}, porcupine.Illegal},
		{"lost acknowledged write", []workload.LinOp{
			op(0, put("a", "x"), ok, 0, 1*ms),
			op(1, get("a"), read(""), 2*ms, 3*ms),
		}, porcupine.Illegal},
		{"cas swapped from a value not held", []workload.LinOp{
			op(0, put("a", "x"), ok, 0, 1*ms),
			op(0, put("a", "y"), ok, 2*ms, 3*ms),
			op(1, cas("a", "x", "z"), swapped, 4*ms, 5*ms),
		}, porcupine.Illegal},
		{"cas failed though the value was held", []workload.LinOp{
			op(0, put("a", "x"), ok, 0, 1*ms),
			op(1, cas("a", "x", "z"), read("x"), 2*ms, 3*ms),
		}, porcupine.Illegal},
		{"two cas both swapped from one value", []workload.LinOp{
			op(0, put("a", "x"), ok, 0, 1*ms),
			op(1, cas("a", "x", "y"), swapped, 2*ms, 5*ms),
			op(2, cas("a", "x", "z"), swapped, 3*ms, 4*ms),
		}, porcupine.Illegal},
		{"values flip back and forth", []workload.LinOp{
			op(0, put("a", "x"), ok, 0, 10*ms),
			op(1, put("a", "y"), ok, 0, 10*ms),
			op(2, get("a"), read("x"), 1*ms, 2*ms),
			op(2, get("a"), read("y"), 3*ms, 4*ms),
			op(2, get("a"), read("x"), 5*ms, 6*ms),
		}, porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &workload.LinResult{Ops: tc.ops, Took: 20 * ms}
			dir := t.TempDir()
			got, info := workload.Check(r.History())
			if got != tc.want {
				t.Fatalf("porcupine says %s, want %s", got, tc.want)
			}
			path, err := workload.Visualize(info, dir, "history")
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil || filepath.Dir(path) != dir || !strings.Contains(string(b), "<html") {
				t.Errorf("visualization %s: %v, %d bytes", path, err, len(b))
			}
		})
	}
}

// TestLinResultHistory: unknown gets are dropped, unknown writes return
// after everything else; the stall and error counts.
func TestLinResultHistory(t *testing.T) {
	ms := time.Millisecond
	dropped := rpctypes.Error(status.Error(codes.Unknown, "raft proposal dropped"))
	r := &workload.LinResult{Took: 90 * ms, Ops: []workload.LinOp{
		op(0, put("a", "x"), ok, 0, 5*ms),
		op(1, get("a"), ok, 10*ms, -60*ms),
		op(2, put("a", "y"), ok, 20*ms, -30*ms),
		{Client: 0, Input: put("a", "z"), Output: ok, Call: 40 * ms, Return: 50 * ms, Attempts: 2, Retried: dropped},
		{Client: 0, Input: put("a", "w"), Output: workload.RegOutput{Unknown: true}, Call: 70 * ms, Return: 80 * ms, Attempts: 2, Retried: dropped, Err: dropped},
	}}
	h := r.History()
	if len(h) != 4 {
		t.Fatalf("history of %d operations, want 4 (the unknown get dropped): %+v", len(h), h)
	}
	if h[1].Return <= int64(80*ms) || h[3].Return <= h[1].Return || h[2].Return != int64(50*ms) {
		t.Errorf("returns %d, %d, %d: want the unknown writes' (first and last) after the last return (%d) and distinct, the answered one's kept", h[1].Return, h[3].Return, h[2].Return, int64(80*ms))
	}
	if s := r.LongestStall(); s != 45*ms {
		t.Errorf("longest stall %s, want 45ms (5ms to 50ms; the end, 90ms, is 40ms after the last success)", s)
	}
	failed, retried := r.Errors()
	if failed["Unknown: raft proposal dropped"] != 1 || failed["DeadlineExceeded: client timeout"] != 2 || retried["put Unknown: raft proposal dropped, then ok"] != 1 || retried["put Unknown: raft proposal dropped, then failed"] != 1 {
		t.Errorf("errors %v, retried %v", failed, retried)
	}
}

// TestRequireLinearizableKeepsVisualization runs RequireLinearizable on a
// stale read in a child test process with -test.artifacts: the child
// fails, naming the violation and the visualization's path, and the HTML
// file is there, under the output directory.
func TestRequireLinearizableKeepsVisualization(t *testing.T) {
	ms := time.Millisecond
	if os.Getenv("STEWARD_LIN_CHILD") == "1" {
		workload.RequireLinearizable(t, "stale read", &workload.LinResult{Took: 10 * ms, Ops: []workload.LinOp{
			op(0, put("a", "x"), ok, 0, 1*ms),
			op(0, put("a", "y"), ok, 2*ms, 3*ms),
			op(1, get("a"), read("x"), 4*ms, 5*ms),
		}})
		return
	}
	out := t.TempDir()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^TestRequireLinearizableKeepsVisualization$", "-test.artifacts", "-test.outputdir", out)
	cmd.Env = append(os.Environ(), "STEWARD_LIN_CHILD=1")
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "stale read: NOT linearizable") {
		t.Fatalf("the child passed or did not name the violation (%v):\n%s", err, b)
	}
	files, _ := filepath.Glob(filepath.Join(out, "_artifacts", "*", "stale-read.html"))
	if len(files) != 1 || !strings.Contains(string(b), files[0]) {
		t.Fatalf("visualizations under %s: %v; the child said:\n%s", out, files, b)
	}
	if html, err := os.ReadFile(files[0]); err != nil || !strings.Contains(string(html), "<html") {
		t.Fatalf("%s: %v, %d bytes", files[0], err, len(html))
	}
}
