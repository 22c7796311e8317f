package backup

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestFindUnknownID: an unknown ID is refused with how many backups the
// store holds and the three nearest IDs, not every ID on one line (a
// store of 55 printed all 55).
func TestFindUnknownID(t *testing.T) {
	var l Listing
	t0 := time.Date(2026, 11, 21, 13, 0, 0, 0, time.UTC)
	for i := range 55 {
		l.Backups = append(l.Backups, Manifest{ID: NewID(KindFull, t0.Add(time.Duration(i)*time.Minute), int64(100+i)), Kind: KindFull})
	}
	want := l.Backups[20].ID
	typo := strings.Replace(want, "-r120", "-r12", 1)
	_, err := l.Find(typo, "/d/backups")
	if !errors.Is(err, ErrUnknownBackup) {
		t.Fatalf("Find(%q) = %v, want ErrUnknownBackup", typo, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "holds 55") || !strings.Contains(msg, want) || strings.Count(msg, "-full-r") != 1+nearestShown {
		t.Errorf("refusal of an unknown ID: %s", msg)
	}
	if _, err := (Listing{}).Find("x", "/d"); !errors.Is(err, ErrUnknownBackup) || !strings.Contains(err.Error(), "holds none") {
		t.Errorf("unknown ID in an empty store: %v", err)
	}
}

func TestNearest(t *testing.T) {
	ids := []string{"alpha", "beta", "gamma", "delta", "alphb"}
	if got := Nearest("alpha1", ids, 2); !slices.Equal(got, []string{"alpha", "alphb"}) {
		t.Errorf("Nearest = %v", got)
	}
	if got := Nearest("x", ids[:1], 3); len(got) != 1 {
		t.Errorf("Nearest of one = %v", got)
	}
}
