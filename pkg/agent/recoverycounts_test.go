package agent

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/recoverycount"
)

// TestPutRecoveryCounts: a joined host's agent keeps the counts its
// coordinator pushes (PUT /v1/recovery-counts) merged: a late push
// changes nothing, a newer one raises them, another recorder is kept
// apart; counts that do not validate, a body with an unknown field, and
// a push to an agent that joined no cluster are refused (400) and change
// nothing.
func TestPutRecoveryCounts(t *testing.T) {
	dir := t.TempDir()
	h := (&Agent{opts: Options{Name: "h1", Dir: dir, ClusterToken: "tok"}}).Handler()
	put := func(h http.Handler, body string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/v1/recovery-counts", strings.NewReader(body)))
		return rec.Code, rec.Body.String()
	}
	kept := func() string {
		b, _ := os.ReadFile(recoverycount.Path(dir))
		return string(b)
	}
	newer := `{"recorder":"00000000000000aa","actions":[{"action":"reseed","reason":"quorum-lost","result":"success","count":2}]}`
	older := `{"recorder":"00000000000000aa","actions":[{"action":"reseed","reason":"quorum-lost","result":"success","count":1}]}`
	for _, b := range []string{newer, older} {
		if code, out := put(h, b); code != http.StatusOK {
			t.Fatalf("push %s: %d %s", b, code, out)
		}
	}
	r, err := recoverycount.Read(dir)
	if err != nil || r == nil || len(r.Recorders) != 1 || r.Recorders[0].Actions[0].Count != 2 {
		t.Fatalf("after a late push: %+v %v, want the count 2 kept", r, err)
	}
	if fi, err := os.Stat(recoverycount.Path(dir)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v %v", fi, err)
	}
	if code, out := put(h, `{"recorder":"00000000000000bb","actions":[{"action":"resume","reason":"unfinished-recovery","result":"failure","count":1}]}`); code != http.StatusOK {
		t.Fatalf("another recorder: %d %s", code, out)
	}
	before := kept()
	if !strings.Contains(before, "00000000000000aa") || !strings.Contains(before, "00000000000000bb") {
		t.Fatalf("kept %s, want both recorders", before)
	}
	for _, c := range []struct{ body, want string }{
		{`{"recorder":"../x","actions":[]}`, "16 lower-case hex digits"},
		{`{"recorder":"00000000000000aa","actions":[{"action":"reseed","result":"success","count":-5}]}`, "count of 0 or more"},
		{`{"recorder":"00000000000000aa","actions":[{"action":"reseed","result":"{bad}","count":5}]}`, "lower-case letters and dashes"},
		{`{"recorder":"00000000000000aa","actions":[],"secret":"x"}`, "unknown field"},
	} {
		code, out := put(h, c.body)
		if code != http.StatusBadRequest || !strings.Contains(out, c.want) {
			t.Errorf("%s: %d %s, want 400 naming %q", c.body, code, out, c.want)
		}
		if kept() != before {
			t.Errorf("%s: the refused push changed the kept counts", c.body)
		}
	}
	// The coordinator's own agent (no --join) keeps none.
	own := t.TempDir()
	code, out := put((&Agent{opts: Options{Name: "local", Dir: own}}).Handler(), newer)
	if code != http.StatusBadRequest || !strings.Contains(out, "only an agent that joined") {
		t.Errorf("push to an agent that joined no cluster: %d %s", code, out)
	}
	if _, err := os.Stat(recoverycount.Path(own)); err == nil {
		t.Errorf("the refused push wrote counts")
	}
}
