package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/agentapi"
)

// The agent's API decodes JSON request bodies from whoever reaches its
// socket or, on a host, its mTLS port. These fuzz targets feed it
// arbitrary bodies.

// fuzzRequests are the request types the API decodes with decodeBody, with
// the limit each handler gives it.
var fuzzRequests = []struct {
	name  string
	limit int64
	new   func() any
}{
	{"member config", 1 << 20, func() any { return new(agentapi.MemberConfig) }},
	{"aside", 1 << 16, func() any { return new(agentapi.AsideRequest) }},
	{"version", 1 << 16, func() any { return new(agentapi.VersionRequest) }},
	{"commit/discard", 1 << 16, func() any { return new(agentapi.Staged) }},
	{"v2 store check", 1 << 16, func() any { return new(agentapi.V2StoreRequest) }},
	{"cluster files", 1 << 20, func() any { return new(agentapi.ClusterFiles) }},
	{"kept copy", 1 << 16, func() any { return new(agentapi.KeptPath) }},
}

// decodeFuzz runs decodeBody on body as a handler would.
func decodeFuzz(body []byte, limit int64, v any) error {
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	return decodeBody(httptest.NewRecorder(), r, limit, v)
}

// FuzzDecodeBody decodes arbitrary bodies as every request type. Property:
// a body decodeBody accepts is within the handler's limit; the value it
// decoded, encoded again, decodes to a value that encodes to the same
// JSON (nothing half understood); and the same body followed by anything
// that is not white space is refused.
func FuzzDecodeBody(f *testing.F) {
	cfg, err := json.Marshal(baseConfig())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(0), cfg)
	f.Add(uint8(0), append(bytes.TrimSuffix(cfg, []byte("}")), []byte(`,"dataDirectory":"/elsewhere"}`)...))
	f.Add(uint8(1), []byte(`{"reason":"replaced"}`))
	f.Add(uint8(2), []byte(`{"version":"3.6.16"}{"version":"3.5.35"}`))
	f.Add(uint8(3), []byte(`{"staged":"/d/etcd-1.staged-20261124"}`))
	f.Add(uint8(4), []byte(`{"version":"3.6.16"}`))
	f.Add(uint8(5), []byte(`{"spec":"bmFtZTogeA==","files":{"ca.crt":"eA=="}}`))
	f.Add(uint8(6), []byte(`{"path":"/d/members/etcd-1/data.pre-restore-20261127T100000.000Z"}`))
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		rq := fuzzRequests[int(kind)%len(fuzzRequests)]
		v := rq.new()
		if err := decodeFuzz(body, rq.limit, v); err != nil {
			return
		}
		if int64(len(bytes.TrimRight(body, " \t\r\n"))) > rq.limit {
			t.Fatalf("%s: a %d-byte body accepted under a limit of %d", rq.name, len(body), rq.limit)
		}
		enc, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: encode the decoded value: %v", rq.name, err)
		}
		w := rq.new()
		if err := decodeFuzz(enc, 1<<30, w); err != nil {
			t.Fatalf("%s: the decoded value, encoded, is refused: %v\n%s", rq.name, err, enc)
		}
		if again, _ := json.Marshal(w); !bytes.Equal(again, enc) {
			t.Fatalf("%s: decode and encode is not a fixed point:\n%s\n%s", rq.name, enc, again)
		}
		if err := decodeFuzz(append(append([]byte(nil), body...), " x"...), 1<<30, rq.new()); err == nil {
			t.Fatalf("%s: trailing data accepted", rq.name)
		}
	})
}

// FuzzPutMember sends arbitrary bodies to PUT /v1/members/etcd-1 through
// the agent's handler. Property: the answer is 200 or 400, never a panic
// or a 500; a 400 stores nothing (no file appears in the agent's
// directory); a 200 stores only etcd-1's config, which GET then returns.
func FuzzPutMember(f *testing.F) {
	good := baseConfig()
	good.DataDir = "data/etcd-1"
	cfg, err := json.Marshal(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(cfg)
	f.Add(bytes.Replace(cfg, []byte(`"etcd-1"`), []byte(`"../../x"`), 1))
	f.Add(bytes.Replace(cfg, []byte(`"max-txn-ops"`), []byte(`"--data-dir"`), 1))
	f.Add(append(cfg, " x"...))
	f.Fuzz(func(t *testing.T, body []byte) {
		root := t.TempDir()
		a := New(Options{Dir: filepath.Join(root, "steward"), Log: slog.New(slog.DiscardHandler)})
		for _, d := range []string{a.membersDir(), filepath.Join(a.opts.Dir, "logs"), a.runDir()} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		h := a.Handler()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/v1/members/etcd-1", bytes.NewReader(body)))
		stored := files(t, root)
		switch rec.Code {
		case http.StatusBadRequest:
			if len(stored) > 0 {
				t.Fatalf("a refused config stored %v: %s", stored, rec.Body)
			}
			if !strings.Contains(rec.Body.String(), `"error"`) {
				t.Fatalf("400 without an error: %s", rec.Body)
			}
		case http.StatusOK:
			if len(stored) != 1 || stored[0] != a.configPath("etcd-1") {
				t.Fatalf("an accepted config stored %v, want only %s", stored, a.configPath("etcd-1"))
			}
			get := httptest.NewRecorder()
			h.ServeHTTP(get, httptest.NewRequest(http.MethodGet, "/v1/members/etcd-1", nil))
			if get.Code != http.StatusOK {
				t.Fatalf("GET after an accepted PUT: %d %s", get.Code, get.Body)
			}
		default:
			t.Fatalf("PUT answered %d: %s", rec.Code, rec.Body)
		}
	})
}

// FuzzStageHeader sends arbitrary X-Steward-Stage headers (SHA replaced by
// the body's SHA-256, so the fuzzer reaches the staging itself) with
// arbitrary snapshot bodies to a stopped member's stage endpoint.
// Property: the agent answers (no panic); a refused stage leaves nothing
// beside the data dir (no staged dir, no version record) and no scratch
// directory; an accepted one leaves one staged dir, with a version record
// exactly when the header asked for one.
func FuzzStageHeader(f *testing.F) {
	f.Add(`{"initialCluster":"etcd-1=http://127.0.0.1:2380","sha256":"SHA"}`, []byte("not a database"))
	f.Add(`{"initialCluster":"etcd-1=http://127.0.0.1:2380","version":"3.6.16","sha256":"SHA"}`, []byte{})
	f.Add(`{"initialCluster":"etcd-1=http://127.0.0.1:2380","version":"v3.6","sha256":"SHA"}`, []byte("x"))
	f.Add(`{"initialCluster":"etcd-1=http://127.0.0.1:2380","memberIDs":{"etcd-1":"zz"},"sha256":"SHA"}`, []byte("x"))
	f.Add(`{"initialCluster":"etcd-1=http://127.0.0.1:2380","dataDir":"/elsewhere","sha256":"SHA"}`, []byte("x"))
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		if resolves(header) {
			return // a DNS name in the initial cluster: etcd's restore resolves it, which a fuzz run does not wait for
		}
		root := t.TempDir()
		a := New(Options{Dir: filepath.Join(root, "steward"), Log: slog.New(slog.DiscardHandler)})
		for _, d := range []string{a.membersDir(), filepath.Join(a.opts.Dir, "logs"), a.runDir()} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		cfg := baseConfig()
		cfg.DataDir = filepath.Join(root, "steward", "members", cfg.Name, "data")
		h := a.Handler()
		put := httptest.NewRecorder()
		b, _ := json.Marshal(cfg)
		h.ServeHTTP(put, httptest.NewRequest(http.MethodPut, "/v1/members/"+cfg.Name, bytes.NewReader(b)))
		if put.Code != http.StatusOK {
			t.Fatalf("put member: %d %s", put.Code, put.Body)
		}
		sum := sha256.Sum256(body)
		req := httptest.NewRequest(http.MethodPut, "/v1/members/"+cfg.Name+"/datadir/stage", bytes.NewReader(body))
		req.Header.Set("X-Steward-Stage", strings.ReplaceAll(header, "SHA", hex.EncodeToString(sum[:])))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		staged, _ := filepath.Glob(cfg.DataDir + ".restoring-*")
		scratch, _ := filepath.Glob(filepath.Join(root, "steward", "tmp-stage-*"))
		if len(scratch) != 0 {
			t.Fatalf("answered %d and left %v", rec.Code, scratch)
		}
		if rec.Code != http.StatusOK {
			if len(staged) != 0 {
				t.Fatalf("a refused stage (%d %s) left %v", rec.Code, rec.Body, staged)
			}
			return
		}
		var out agentapi.Staged
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Staged == "" {
			t.Fatalf("200 without a staged dir: %s", rec.Body)
		}
		var req2 agentapi.StageRequest
		_ = json.Unmarshal([]byte(req.Header.Get("X-Steward-Stage")), &req2)
		want := []string{out.Staged}
		if req2.Version != "" {
			want = append(want, out.Staged+".version")
		}
		if !slices.Equal(staged, want) {
			t.Fatalf("an accepted stage left %v, want %v", staged, want)
		}
	})
}

// resolves reports whether a stage header's initial cluster names a host
// that is not an IP address (etcd's restore would look it up).
func resolves(header string) bool {
	var req agentapi.StageRequest
	if json.Unmarshal([]byte(header), &req) != nil {
		return false
	}
	for pair := range strings.SplitSeq(req.InitialCluster, ",") {
		_, raw, _ := strings.Cut(pair, "=")
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		if h := u.Hostname(); h != "" && net.ParseIP(h) == nil {
			return true
		}
	}
	return false
}
