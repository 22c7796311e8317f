package datadir

import (
	"testing"
	"time"
)

func TestVersionRecord(t *testing.T) {
	dir := t.TempDir() + "/data"
	if _, ok, err := ReadRecord(dir); ok || err != nil {
		t.Fatalf("no record yet: ok=%v err=%v", ok, err)
	}
	if err := WriteRecord(dir, "3.6.16", time.Unix(100, 0)); err != nil {
		t.Fatal(err)
	}
	rec, ok, err := ReadRecord(dir)
	if err != nil || !ok || rec.Version != "3.6.16" || !rec.UpdatedAt.Equal(time.Unix(100, 0)) {
		t.Fatalf("record: %+v ok=%v err=%v", rec, ok, err)
	}
}
