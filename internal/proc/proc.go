// Package proc reads what Steward needs to know about processes from /proc:
// whether one is alive and what its command line is. A zombie counts as
// dead: it has exited, only its exit status is left to reap (members whose
// agent died are reparented and may stay zombies where PID 1 does not reap).
package proc

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain them: look after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return !(i > 0 && i+2 < len(b) && b[i+2] == 'Z')
}

// Cmdline returns the arguments of pid (nil when it is gone).
func Cmdline(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// HasArg reports whether pid is alive and was started with arg exactly.
func HasArg(pid int, arg string) bool {
	for _, a := range Cmdline(pid) {
		if a == arg {
			return Alive(pid)
		}
	}
	return false
}

// Find returns the live processes, other than this one, whose arguments
// satisfy match.
func Find(match func(args []string) bool) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if args := Cmdline(pid); args != nil && match(args) && Alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}
