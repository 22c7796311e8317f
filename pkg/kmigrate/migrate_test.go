package kmigrate

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// TestRunRefusesBadOptions: invalid Options are refused with ErrOptions
// before any request, in words of the Options fields, not of a command's
// flags.
func TestRunRefusesBadOptions(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no config", Options{All: true}, "no client configuration"},
		{"twice", Options{Config: cfg, All: true, Resources: []string{"configmaps"}}, "All and Resources both select resources"},
		{"nothing", Options{Config: cfg}, "no resources selected"},
		{"negative", Options{Config: cfg, All: true, QPS: -1}, "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Run(context.Background(), tc.o)
			if rep != nil || !errors.Is(err, ErrOptions) {
				t.Fatalf("Run = %v, %v; want ErrOptions", rep, err)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "--") {
				t.Errorf("Run: %q, want it to say %q and name no flag", err, tc.want)
			}
		})
	}
}
