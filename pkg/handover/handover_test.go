package handover

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
)

func signer(t *testing.T, cluster string) (*Signer, string) {
	t.Helper()
	dir := t.TempDir()
	if err := pki.Ensure(dir, cluster, nil); err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

// firstCoordinator is a coordinator of cluster c1 (signer s) on a new
// local store.
func firstCoordinator(t *testing.T) (*backup.LocalStore, *Signer, *Coordinator) {
	t.Helper()
	store, err := backup.NewLocalStore(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := signer(t, "c1")
	return store, s, &Coordinator{Store: store, Signer: s, Dir: t.TempDir()}
}

func TestTakeOverFencesTheOldCoordinator(t *testing.T) {
	ctx := t.Context()
	store, s, old := firstCoordinator(t)
	if err := old.SaveSpec(ctx, []byte("name: c1\n")); err != nil {
		t.Fatal(err)
	}
	p := &plan.Plan{ID: "upgrade-1", State: plan.Running, Steps: []plan.Step{{Index: 0, State: plan.Done}}}
	if err := old.SavePlan(ctx, p); err != nil {
		t.Fatal(err)
	}
	// A forger without the admin key writes a newer spec and plan, and a
	// higher owner generation: all ignored.
	forger, _ := signer(t, "c1")
	f := &Coordinator{Store: store, Signer: forger, Dir: t.TempDir()}
	if err := f.write(ctx, prefix+"spec/"+stamp(9), "spec", "name: forged\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.write(ctx, prefix+"plans/upgrade-1/"+stamp(9), "plan", &plan.Plan{ID: "upgrade-1", State: plan.Done}); err != nil {
		t.Fatal(err)
	}
	if err := f.write(ctx, prefix+"owner/0000000009", "owner", Owner{Generation: 9}); err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, prefix+"spec/"+stamp(10), strings.NewReader("not an envelope")); err != nil {
		t.Fatal(err)
	}

	next := &Coordinator{Store: store, Signer: s, Dir: t.TempDir()}
	got, err := next.Take(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Spec) != "name: c1\n" || len(got.Plans) != 1 || got.Plans[0].State != plan.Running {
		t.Fatalf("took a forged copy: spec %q plans %+v", got.Spec, got.Plans)
	}
	if got.Generation != 2 || got.Previous.Generation != 1 {
		t.Fatalf("generation %d after %d; want 2 after 1 (the forged 9 ignored)", got.Generation, got.Previous.Generation)
	}
	// The old coordinator is fenced: its next save fails and writes nothing.
	before, _ := store.List(ctx, prefix+"plans/upgrade-1/")
	if err := old.SavePlan(ctx, p); !errors.Is(err, ErrSuperseded) || !strings.Contains(err.Error(), "generation 2") {
		t.Fatalf("stale coordinator's save: %v", err)
	}
	if after, _ := store.List(ctx, prefix+"plans/upgrade-1/"); len(after) != len(before) {
		t.Fatalf("the stale coordinator wrote a copy: %v -> %v", before, after)
	}
	// The new one saves.
	if err := next.SavePlan(ctx, p); err != nil {
		t.Fatal(err)
	}
	// A refusal by accept claims nothing.
	third := &Coordinator{Store: store, Signer: s, Dir: t.TempDir()}
	if _, err := third.Take(ctx, func([]byte) error { return errors.New("no") }); err == nil {
		t.Fatal("accept's refusal ignored")
	}
	if o, _ := third.CurrentOwner(ctx); o.Generation != 2 {
		t.Fatalf("a refused takeover claimed generation %d", o.Generation)
	}
}

func TestSignerRefusesNonAdmin(t *testing.T) {
	dir := t.TempDir()
	if err := pki.Ensure(dir, "c1", nil); err != nil {
		t.Fatal(err)
	}
	b, err := pki.IssueHost(dir, "c1", "h1", "10.0.0.1", pki.Validity{})
	if err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	if err := pki.WriteHost(host, b); err != nil {
		t.Fatal(err)
	}
	if _, err := NewSigner(host); err == nil || !strings.Contains(err.Error(), "not the admin's") {
		t.Fatalf("a host certificate signs coordinator copies: %v", err)
	}
}

// A copy signed before the admin certificate was renewed (a new key) still
// verifies; one signed by an admin certificate of another CA does not.
func TestCopiesSurviveAdminRenewal(t *testing.T) {
	ctx := t.Context()
	store, err := backup.NewLocalStore(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	s, dir := signer(t, "c1")
	old := &Coordinator{Store: store, Signer: s, Dir: t.TempDir()}
	if err := old.SaveSpec(ctx, []byte("name: c1\n")); err != nil {
		t.Fatal(err)
	}
	// Renew the admin certificate: a new key from the same CA.
	for _, f := range []string{pki.ClientCert, pki.ClientKey} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := pki.Ensure(dir, "c1", nil); err != nil {
		t.Fatal(err)
	}
	renewed, err := NewSigner(dir)
	if err != nil {
		t.Fatal(err)
	}
	next := &Coordinator{Store: store, Signer: renewed, Dir: t.TempDir()}
	got, err := next.Take(ctx, nil)
	if err != nil {
		t.Fatalf("a copy from before the renewal: %v", err)
	}
	if string(got.Spec) != "name: c1\n" {
		t.Fatalf("spec %q", got.Spec)
	}
	// Another CA's admin cannot take over.
	other, _ := signer(t, "c1")
	if _, err := (&Coordinator{Store: store, Signer: other, Dir: t.TempDir()}).Take(ctx, nil); err == nil {
		t.Fatal("another CA's admin took over")
	}
}

// TestRecoveryJournalHandedOver: the newest verified journal copy reaches
// the coordinator that takes over; a forged one is ignored; a finished
// recovery ("" written last) hands over none; a stale coordinator cannot
// write one.
func TestRecoveryJournalHandedOver(t *testing.T) {
	ctx := t.Context()
	store, s, old := firstCoordinator(t)
	if err := old.SaveSpec(ctx, []byte("name: c1\n")); err != nil {
		t.Fatal(err)
	}
	journal := []byte(`{"seed":"etcd-3","seededAt":"2026-11-27T22:00:00Z"}`)
	if err := old.SaveRecovery(ctx, journal); err != nil {
		t.Fatal(err)
	}
	forger, _ := signer(t, "c1")
	f := &Coordinator{Store: store, Signer: forger, Dir: t.TempDir()}
	if err := f.write(ctx, prefix+"recovery/"+stamp(9), "recovery", `{"seed":"etcd-1"}`); err != nil {
		t.Fatal(err)
	}
	next := &Coordinator{Store: store, Signer: s, Dir: t.TempDir()}
	got, err := next.Take(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.RecoveryJournal) != string(journal) {
		t.Fatalf("journal handed over: %q, want %q", got.RecoveryJournal, journal)
	}
	if err := old.SaveRecovery(ctx, nil); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("stale coordinator's journal copy: %v", err)
	}
	// The new coordinator finishes it: nothing to hand over then.
	if err := next.SaveRecovery(ctx, nil); err != nil {
		t.Fatal(err)
	}
	third := &Coordinator{Store: store, Signer: s, Dir: t.TempDir()}
	if got, err := third.Take(ctx, nil); err != nil || got.RecoveryJournal != nil {
		t.Fatalf("after the recovery finished: %q %v", got.RecoveryJournal, err)
	}
}

// TestOwnerCopiedUnderAnotherName: a signed owner record copied by someone
// who can write the store under a higher generation's name does not make
// its owner current again (the signature covers the record, not the name):
// the superseded coordinator stays fenced.
func TestOwnerCopiedUnderAnotherName(t *testing.T) {
	ctx := t.Context()
	store, s, old := firstCoordinator(t)
	if err := old.SaveSpec(ctx, []byte("name: c1\n")); err != nil {
		t.Fatal(err)
	}
	next := &Coordinator{Store: store, Signer: s, Dir: t.TempDir()}
	if _, err := next.Take(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// Generation 1's signed record, copied as generation 9's.
	rc, err := store.Get(ctx, ownerName(1))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, prefix+"owner/0000000009", bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	if o, err := next.CurrentOwner(ctx); err != nil || o.Generation != 2 {
		t.Fatalf("current owner %+v (%v), want generation 2: the copy under 9's name counted", o, err)
	}
	if err := old.SaveSpec(ctx, []byte("name: c1\n")); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("the superseded coordinator's save: %v, want ErrSuperseded", err)
	}
}

// copyObject copies store object from to name to, as someone who can
// write the store (not sign) could.
func copyObject(t *testing.T, store backup.Store, from, to string) {
	t.Helper()
	rc, err := store.Get(t.Context(), from)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(t.Context(), to, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
}

// oldest is the first (oldest) object under dir.
func oldest(t *testing.T, store backup.Store, dir string) string {
	t.Helper()
	names, err := store.List(t.Context(), dir)
	if err != nil || len(names) == 0 {
		t.Fatalf("objects under %s: %v, %v", dir, names, err)
	}
	slices.Sort(names)
	return names[0]
}

// TestCopiesUnderAnotherName: spec and plan copies are ordered by their
// names, which the signature now covers: an old signed copy copied under
// a higher generation's name (by someone who can write the store, not
// sign) is not taken as current by a takeover; the newest copy written
// under its own name is. A legacy copy (signed before names were) counts
// only where no copy is bound to its name. Before the fix the takeover
// read the old spec and the old plan state.
func TestCopiesUnderAnotherName(t *testing.T) {
	ctx := t.Context()
	store, s, old := firstCoordinator(t)
	if err := old.SaveSpec(ctx, []byte("name: c1\nversion: old\n")); err != nil {
		t.Fatal(err)
	}
	if err := old.SavePlan(ctx, &plan.Plan{ID: "upgrade-1", State: plan.Running}); err != nil {
		t.Fatal(err)
	}
	oldSpec, oldPlan := oldest(t, store, prefix+"spec/"), oldest(t, store, prefix+"plans/upgrade-1/")
	if err := old.SaveSpec(ctx, []byte("name: c1\nversion: new\n")); err != nil {
		t.Fatal(err)
	}
	if err := old.SavePlan(ctx, &plan.Plan{ID: "upgrade-1", State: plan.Done}); err != nil {
		t.Fatal(err)
	}
	// The old copies, under generation 9's names.
	copyObject(t, store, oldSpec, prefix+"spec/"+stamp(9))
	copyObject(t, store, oldPlan, prefix+"plans/upgrade-1/"+stamp(9))
	// A legacy copy (its name not signed) under a higher name still: it
	// does not count beside copies bound to their names.
	legacy, err := s.seal("spec", "", []byte(`"name: c1\nversion: legacy\n"`))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, prefix+"spec/"+stamp(10), bytes.NewReader(legacy)); err != nil {
		t.Fatal(err)
	}

	next := &Coordinator{Store: store, Signer: s, Dir: t.TempDir()}
	to, err := next.Take(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(to.Spec), "version: new") {
		t.Errorf("spec taken over: %q, want the newest copy written under its own name (version: new)", to.Spec)
	}
	if len(to.Plans) != 1 || to.Plans[0].State != plan.Done {
		t.Errorf("plans taken over: %+v, want upgrade-1 Done (its newest copy under its own name)", to.Plans)
	}

	// A store holding legacy copies only (written by an older Steward):
	// the newest of them is read, as before.
	store2, err := backup.NewLocalStore(filepath.Join(t.TempDir(), "store2"))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range []string{"a", "b"} {
		b, err := s.seal("spec", "", []byte(`"name: c1\nversion: `+v+`\n"`))
		if err != nil {
			t.Fatal(err)
		}
		if err := store2.Put(ctx, prefix+"spec/"+stamp(int64(i+1)), bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	var spec string
	if _, err := (&Coordinator{Store: store2, Signer: s, Dir: t.TempDir()}).newest(ctx, prefix+"spec/", "spec", &spec); err != nil || !strings.Contains(spec, "version: b") {
		t.Errorf("legacy copies only: %q, %v; want the newest (version: b)", spec, err)
	}
}
