package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/agentapi"
)

// apiAgent returns an agent whose Steward directory is ROOT/steward, with
// the directories Run would make, and a test server running its handler.
func apiAgent(t *testing.T) (root string, a *Agent, srv *httptest.Server) {
	t.Helper()
	root = t.TempDir()
	a = New(Options{Dir: filepath.Join(root, "steward"), Log: slog.New(slog.DiscardHandler)})
	for _, d := range []string{a.membersDir(), filepath.Join(a.opts.Dir, "logs"), a.runDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	srv = httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	return root, a, srv
}

// call sends a request with a raw body and returns the status and body.
// Redirects are not followed: a redirect is an answer too.
func call(t *testing.T, srv *httptest.Server, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func configJSON(t *testing.T, c agentapi.MemberConfig) string {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// files lists the regular files under root.
func files(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAPIRejectsTraversalNames: a member name that is not a valid name
// (here ../../x, sent escaped so that it is one URL segment) is refused
// with 400 by every endpoint that takes a name, before it reaches a path:
// no file appears anywhere, in the members dir or outside it.
func TestAPIRejectsTraversalNames(t *testing.T) {
	root, _, srv := apiAgent(t)
	evil := baseConfig()
	evil.Name = "../../x"
	evil.DataDir = filepath.Join(root, "data")
	for _, seg := range []string{"..%2F..%2Fx", "..%2F..%2F..%2Fx", "%2E%2E%2Fx", "a%2Fb", "Etcd-1", "x%00", ".x"} {
		for _, rq := range []struct{ method, path, body string }{
			{http.MethodPut, "/v1/members/" + seg, configJSON(t, evil)},
			{http.MethodGet, "/v1/members/" + seg, ""},
			{http.MethodDelete, "/v1/members/" + seg, ""},
			{http.MethodPost, "/v1/members/" + seg + "/start", ""},
			{http.MethodPost, "/v1/members/" + seg + "/version", `{"version":"3.6.16"}`},
		} {
			code, body := call(t, srv, rq.method, rq.path, rq.body)
			if code != http.StatusBadRequest || !strings.Contains(body, "member name") || !strings.Contains(body, "lower-case letters") {
				t.Errorf("%s %s: %d %s, want 400 naming the bad member name", rq.method, rq.path, code, body)
			}
			// Checked after each request: a DELETE let through would
			// remove what a PUT let through had written.
			if f := files(t, root); len(f) > 0 {
				t.Fatalf("%s %s wrote files: %v", rq.method, rq.path, f)
			}
		}
	}
}

// TestPutMemberRejectsBadName: the config's own name is checked too (the
// handler compares it with the URL's, PutMember checks it again).
func TestPutMemberRejectsBadName(t *testing.T) {
	root, a, _ := apiAgent(t)
	c := baseConfig()
	c.Name = "../../x"
	if _, err := a.PutMember(c); err == nil || !strings.Contains(err.Error(), "lower-case letters") {
		t.Errorf("PutMember with name %q: %v, want a refusal", c.Name, err)
	}
	if f := files(t, root); len(f) > 0 {
		t.Errorf("files written for a refused name: %v", f)
	}
}

// TestAPIRejectsUnknownFieldsAndTrailingData: a body with a field the
// agent does not know, or with anything after the JSON object, is refused
// instead of being half understood.
func TestAPIRejectsUnknownFieldsAndTrailingData(t *testing.T) {
	root, _, srv := apiAgent(t)
	good := baseConfig()
	good.DataDir = filepath.Join(root, "data", good.Name)
	cfg := configJSON(t, good)
	withField := strings.TrimSuffix(cfg, "}") + `,"dataDirectory":"/elsewhere"}`

	for _, tc := range []struct{ what, body, want string }{
		{"unknown field", withField, `unknown field \"dataDirectory\"`},
		{"unknown nested field", strings.Replace(cfg, `"tls":{`, `"tls":{"insecure":true,`, 1), `unknown field \"insecure\"`},
		{"second object", cfg + `{"name":"etcd-2"}`, "after the JSON object"},
		{"trailing garbage", cfg + ` x`, "after the JSON object"},
	} {
		code, body := call(t, srv, http.MethodPut, "/v1/members/"+good.Name, tc.body)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("PUT with %s: %d %s, want 400 containing %s", tc.what, code, body, tc.want)
		}
	}
	if f := files(t, root); len(f) > 0 {
		t.Fatalf("a refused config was stored: %v", f)
	}

	// Trailing white space is not data.
	if code, body := call(t, srv, http.MethodPut, "/v1/members/"+good.Name, cfg+"\n \n"); code != http.StatusOK {
		t.Fatalf("PUT of a valid config: %d %s", code, body)
	}
	for _, tc := range []struct{ what, body, want string }{
		{"unknown field", `{"version":"3.6.16","force":true}`, `unknown field \"force\"`},
		{"second object", `{"version":"3.6.16"}{"version":"3.5.35"}`, "after the JSON object"},
	} {
		code, body := call(t, srv, http.MethodPost, "/v1/members/"+good.Name+"/version", tc.body)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("version request with %s: %d %s, want 400 containing %s", tc.what, code, body, tc.want)
		}
	}
}

// TestAPIRejectsReservedFlags: a member config cannot override, through
// extraFlags, a flag Steward sets (TLS, where the data goes, the cluster).
func TestAPIRejectsReservedFlags(t *testing.T) {
	root, _, srv := apiAgent(t)
	c := baseConfig()
	c.DataDir = filepath.Join(root, "data", c.Name)
	for k, want := range map[string]string{
		"peer-cert-allowed-cn": "TLS", "--wal-dir": "where a member keeps its data",
		"experimental-peer-skip-client-san-verification": "TLS", "--data-dir": "set by Steward",
	} {
		c.ExtraFlags = map[string]string{k: "x"}
		code, body := call(t, srv, http.MethodPut, "/v1/members/"+c.Name, configJSON(t, c))
		if code != http.StatusBadRequest || !strings.Contains(body, want) {
			t.Errorf("extra flag %s: %d %s, want 400 containing %q", k, code, body, want)
		}
	}
	if f := files(t, root); len(f) > 0 {
		t.Fatalf("a refused config was stored: %v", f)
	}
}

// TestAdviseAPIErrors: the errors the API returns get the command layer's
// advice (Options.Advise), keeping their status code; without it they
// are the agent's own words.
func TestAdviseAPIErrors(t *testing.T) {
	root := t.TempDir()
	a := New(Options{Dir: filepath.Join(root, "steward"), Log: slog.New(slog.DiscardHandler),
		Advise: func(err error) error {
			if errors.Is(err, ErrNoHostCerts) {
				return fmt.Errorf("%w (advised)", err)
			}
			return err
		}})
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	if code, body := call(t, srv, http.MethodGet, "/v1/certs/server", ""); code != http.StatusBadRequest || !strings.Contains(body, "renew there) (advised)") {
		t.Errorf("advised: %d %s", code, body)
	}
	_, _, plain := apiAgent(t)
	if code, body := call(t, plain, http.MethodGet, "/v1/certs/server", ""); code != http.StatusBadRequest || strings.Contains(body, "advised") {
		t.Errorf("not advised: %d %s", code, body)
	}
}
