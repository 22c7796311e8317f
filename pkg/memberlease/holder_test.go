package memberlease

import (
	"errors"
	"strings"
	"testing"
)

func TestParseHolder(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Holder
		err  error
		says string
	}{
		{in: "272e204152:Leader", want: Holder{ID: 0x272e204152, Role: RoleLeader}},
		{in: "8e9e05c52164694d:Member", want: Holder{ID: 0x8e9e05c52164694d, Role: RoleMember}},
		{in: "FFFFFFFFFFFFFFFF:Member", want: Holder{ID: ^uint64(0), Role: RoleMember}},
		{in: "1:Leader", want: Holder{ID: 1, Role: RoleLeader}},
		{in: "", err: ErrNoHolder},
		{in: "272e204152", err: ErrBadHolder, says: "no colon"},
		{in: ":Leader", err: ErrBadHolder, says: "1 to 16 hex digits"},
		{in: "10000000000000000:Leader", err: ErrBadHolder, says: "1 to 16 hex digits"},
		{in: "0x12:Leader", err: ErrBadHolder, says: "not hex"},
		{in: "+12:Leader", err: ErrBadHolder, says: "not hex"},
		{in: "0:Leader", err: ErrBadHolder, says: "member ID 0"},
		{in: "12:leader", err: ErrBadHolder, says: `role "leader"`},
		{in: "12:Learner", err: ErrBadHolder, says: `role "Learner"`},
		{in: "12:Leader:x", err: ErrBadHolder, says: "role"},
		{in: "12:", err: ErrBadHolder, says: "role"},
		{in: strings.Repeat("a", 65), err: ErrBadHolder, says: "65 bytes"},
	} {
		got, err := ParseHolder(tc.in)
		switch {
		case tc.err == nil && err != nil:
			t.Errorf("ParseHolder(%q): %v", tc.in, err)
		case tc.err != nil && !errors.Is(err, tc.err):
			t.Errorf("ParseHolder(%q) = %v, %v; want %v", tc.in, got, err, tc.err)
		case tc.err != nil && !strings.Contains(err.Error(), tc.says):
			t.Errorf("ParseHolder(%q): %q does not say %q", tc.in, err, tc.says)
		case got != tc.want:
			t.Errorf("ParseHolder(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestHolderString(t *testing.T) {
	h := Holder{ID: 0x8e9e05c52164694d, Role: RoleLeader}
	if got := h.String(); got != "8e9e05c52164694d:Leader" {
		t.Errorf("String() = %q", got)
	}
	if got := (Holder{ID: 0xa, Role: RoleMember}).String(); got != "a:Member" {
		t.Errorf("String() = %q", got)
	}
	if got := h.IDHex(); got != "8e9e05c52164694d" {
		t.Errorf("IDHex() = %q", got)
	}
}

// FuzzParseHolder: whatever the API server hands back never panics, and
// what parses is written back as the agent writes it and parses to the
// same holder.
func FuzzParseHolder(f *testing.F) {
	for _, s := range []string{"", "272e204152:Leader", "8e9e05c52164694d:Member", "0:Leader", "ABC:Member", "x:y", ":", "1:Leader:Member", "00000000000000001:Leader"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHolder(s)
		if err != nil {
			if !errors.Is(err, ErrNoHolder) && !errors.Is(err, ErrBadHolder) {
				t.Fatalf("ParseHolder(%q): %v is neither ErrNoHolder nor ErrBadHolder", s, err)
			}
			return
		}
		if h.ID == 0 || (h.Role != RoleLeader && h.Role != RoleMember) {
			t.Fatalf("ParseHolder(%q) = %+v", s, h)
		}
		back, err := ParseHolder(h.String())
		if err != nil || back != h {
			t.Fatalf("ParseHolder(%q) = %+v, whose String %q parses to %+v, %v", s, h, h.String(), back, err)
		}
		if !strings.EqualFold(strings.TrimLeft(s[:strings.IndexByte(s, ':')], "0"), h.IDHex()) {
			t.Fatalf("ParseHolder(%q): ID %s", s, h.IDHex())
		}
	})
}

func TestParseRef(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Ref
		says string
	}{
		{in: "default/etcd-0", want: Ref{"default", "etcd-0"}},
		{in: "team-a/main.etcd-2", want: Ref{"team-a", "main.etcd-2"}},
		{in: "etcd-0", says: "NAMESPACE/NAME"},
		{in: "a/b/c", says: "NAMESPACE/NAME"},
		{in: "/etcd-0", says: "namespace"},
		{in: "default/", says: "name"},
		{in: "Default/etcd-0", says: "lower-case"},
		{in: "default/-etcd", says: "lower-case"},
		{in: "default/etcd_0", says: "lower-case"},
	} {
		got, err := ParseRef(tc.in)
		switch {
		case tc.says == "" && err != nil:
			t.Errorf("ParseRef(%q): %v", tc.in, err)
		case tc.says != "" && (!errors.Is(err, ErrBadRef) || !strings.Contains(err.Error(), tc.says)):
			t.Errorf("ParseRef(%q) = %v, %v; want ErrBadRef saying %q", tc.in, got, err, tc.says)
		case got != tc.want:
			t.Errorf("ParseRef(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	if s := (Ref{"ns", "n"}).String(); s != "ns/n" {
		t.Errorf("String() = %q", s)
	}
}

func TestRefFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	r, err := RefFromEnv(env(map[string]string{EnvNamespace: "prod", EnvName: "main-1"}))
	if err != nil || r != (Ref{"prod", "main-1"}) {
		t.Errorf("RefFromEnv = %+v, %v", r, err)
	}
	_, err = RefFromEnv(env(map[string]string{EnvName: "main-1"}))
	if !errors.Is(err, ErrBadRef) || !strings.Contains(err.Error(), "POD_NAMESPACE not set") {
		t.Errorf("without POD_NAMESPACE: %v", err)
	}
	_, err = RefFromEnv(env(nil))
	if err == nil || !strings.Contains(err.Error(), "POD_NAMESPACE and POD_NAME not set") {
		t.Errorf("without either: %v", err)
	}
	_, err = RefFromEnv(env(map[string]string{EnvNamespace: "prod", EnvName: "Main"}))
	if !errors.Is(err, ErrBadRef) {
		t.Errorf("bad name: %v", err)
	}
}
