package cluster

import (
	"context"
	"errors"
	"strings"
	"time"
)

// ProbeTimeout bounds every per-member and per-agent call of a status
// probe (pkg/status) and of the host probes asked alongside it.
const ProbeTimeout = 2 * time.Second

// ShortErr is err as an operator reads it: gRPC wrapping cut off, a
// deadline named as the probe timeout.
func ShortErr(err error) string {
	s := err.Error()
	if errors.Is(err, context.DeadlineExceeded) {
		s = "no answer within " + ProbeTimeout.String()
	}
	if i := strings.Index(s, "desc = "); i >= 0 {
		s = s[i+len("desc = "):]
	}
	return s
}
