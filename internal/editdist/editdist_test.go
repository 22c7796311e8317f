package editdist

import "testing"

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "abc", 3}, {"same", "same", 0},
		{"configmaps", "confgmaps", 1}, {"kitten", "sitting", 3}, {"pods", "podz", 1},
	} {
		if d := Distance(tc.a, tc.b); d != tc.d {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, d, tc.d)
		}
	}
}
