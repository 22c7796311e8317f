package subnet

import (
	"net/netip"
	"testing"
)

func TestFirst(t *testing.T) {
	pfx := netip.MustParsePrefix
	for _, tc := range []struct {
		name string
		used []netip.Prefix
		want string
	}{
		{"nothing used", nil, "10.213.0.0/24"},
		{"the first taken", []netip.Prefix{pfx("10.213.0.0/24")}, "10.213.1.0/24"},
		{"a wider net over the first", []netip.Prefix{pfx("10.213.0.0/23"), pfx("127.0.0.0/8")}, "10.213.2.0/24"},
		{"all of 10/8", []netip.Prefix{pfx("10.0.0.0/8")}, ""},
	} {
		got, err := first(tc.used)
		if tc.want == "" {
			if err == nil {
				t.Errorf("%s: got %s, want an error", tc.name, got)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("%s: got %s, %v; want %s", tc.name, got, err, tc.want)
		}
	}
}
