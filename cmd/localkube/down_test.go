package main

import (
	"strings"
	"testing"
)

// TestIsSupervisor: down signals only the supervisor of its directory, not
// whatever process got a dead supervisor's PID.
func TestIsSupervisor(t *testing.T) {
	argv := func(a ...string) []byte { return []byte(strings.Join(a, "\x00") + "\x00") }
	if !isSupervisor(argv("/usr/bin/localkube", "up", "--supervise", "--dir", "/tmp/lk", "--nodes", "3"), "/tmp/lk") {
		t.Error("the supervisor not recognised")
	}
	for name, c := range map[string][]byte{
		"another process":   argv("/usr/sbin/sshd", "-D"),
		"another directory": argv("/usr/bin/localkube", "up", "--supervise", "--dir", "/tmp/other"),
		"not supervising":   argv("/usr/bin/localkube", "up", "--dir", "/tmp/lk"),
		"gone":              nil,
	} {
		if isSupervisor(c, "/tmp/lk") {
			t.Errorf("%s taken for the supervisor", name)
		}
	}
}
