package proc

import (
	"os"
	"strings"
)

// LogTail is the last n lines of the log file at path, joined by " | "
// ("" when it cannot be read): what a process that exited at start said
// about why, for the error that reports it.
func LogTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
