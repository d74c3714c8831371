package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convoy-im/convoy/histcache"
	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/router"
)

// fakeRamps ramps one shard: the keys in target read from alt, the others
// from the routes; it records every observed read.
type fakeRamps struct {
	shard  router.Shard
	target map[uint64]bool
	alt    *router.Snapshot

	mu   sync.Mutex
	seen []string
}

func (f *fakeRamps) Any() bool { return true }

func (f *fakeRamps) ReadSnapshot(_ *router.Snapshot, sh router.Shard, key uint64) (*router.Snapshot, bool) {
	switch {
	case sh != f.shard:
		return nil, false
	case f.target[key]:
		return f.alt, true
	}
	return nil, true
}

func (f *fakeRamps) ObserveRead(sh router.Shard, target bool, d time.Duration, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	side := "old"
	if target {
		side = "new"
	}
	f.seen = append(f.seen, fmt.Sprintf("%s %s failed=%v", sh, side, err != nil))
}

func (f *fakeRamps) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.seen
	f.seen = nil
	return s
}

// TestRampedReadsObserved: the reads a ramp decides (single key, outside
// transactions) are observed on the side they ran on, failures included
// (a server error, and no connection at all); writes, reads in
// transactions and other shards' reads are not.
// rampFixture is shard 5 ramped to database im_new on the other
// datasource: toNew's reads go there, onOld's (same shard) stay.
type rampFixture struct {
	snap         *router.Snapshot
	from         router.Target
	newDS        string
	toNew, onOld uint64
	ramps        *fakeRamps
}

func newRampFixture(t *testing.T) rampFixture {
	t.Helper()
	f := rampFixture{snap: defaultSnapshot()}
	var inShard []uint64
	for k := uint64(1); len(inShard) < 2; k++ {
		if router.ShardOf(k) == 5 {
			inShard = append(inShard, k)
		}
	}
	f.toNew, f.onOld = inShard[0], inShard[1]
	f.from = f.snap.Target(5)
	f.newDS = "ds1"
	if f.from.Datasource == "ds1" {
		f.newDS = "ds0"
	}
	alt, err := router.NewSnapshot(router.MoveShard(f.snap.Document(), 5, f.newDS, "im_new", nil))
	if err != nil {
		t.Fatal(err)
	}
	f.ramps = &fakeRamps{shard: 5, target: map[uint64]bool{f.toNew: true}, alt: alt}
	return f
}

func TestRampedReadsObserved(t *testing.T) {
	f := newRampFixture(t)
	snap, toNew, onOld, newDS, ramps := f.snap, f.toNew, f.onOld, f.newDS, f.ramps
	rec := &recorder{cols: 6}
	e := New(rec, staticRoutes{snap}, nil, nil, Options{})
	e.SetReadRamps(ramps)
	s := e.NewSession("im")
	other := uint64(1)
	for router.ShardOf(other) == 5 {
		other++
	}
	run := func(sql string) error {
		t.Helper()
		_, err := s.Query(sql)
		return err
	}
	for _, q := range []string{
		fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id = %d", toNew),
		fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id = %d", onOld),
		fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id = %d", other),
		fmt.Sprintf("UPDATE conv_msg SET status = 1 WHERE conv_id = %d", toNew),
		"BEGIN", fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id = %d", toNew), "COMMIT",
	} {
		if err := run(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	logged := rec.take()
	if len(logged) == 0 || !strings.HasPrefix(logged[0], newDS+"#") || !strings.Contains(logged[0], "`im_new`.") {
		t.Fatalf("the ramped read did not go to the target: %v", logged)
	}
	if got, want := fmt.Sprint(ramps.take()), "[0005 new failed=false 0005 old failed=false]"; got != want {
		t.Fatalf("observed %s, want %s; statements:\n%v", got, want, logged)
	}
	// The target's server fails the read, then the target cannot be
	// reached: both are the new side's errors.
	rec.failOn, rec.failDS = "conv_msg", newDS
	if err := run(fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id = %d", toNew)); err == nil {
		t.Fatal("the target's error did not reach the client")
	}
	rec.failOn = ""
	rec.failAcquire = map[string]error{newDS: &backend.UnavailableError{Datasource: newDS, Err: fmt.Errorf("down")}}
	if err := run(fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id = %d", toNew)); err == nil {
		t.Fatal("a read of an unreachable target succeeded")
	}
	if err := run(fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id = %d", onOld)); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(ramps.take()), "[0005 new failed=true 0005 new failed=true 0005 old failed=false]"; got != want {
		t.Fatalf("observed %s, want %s", got, want)
	}
}

// recordingHot is a HotTier that misses every read and records the calls.
type recordingHot struct {
	mu    sync.Mutex
	calls []string
}

func (h *recordingHot) note(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, fmt.Sprintf(format, args...))
}

func (h *recordingHot) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.calls...)
}

func (h *recordingHot) Before(_ context.Context, conv, _ uint64, _ int) ([]histcache.Entry, bool, error) {
	h.note("Before %d", conv)
	return nil, false, nil
}
func (h *recordingHot) After(_ context.Context, conv, _ uint64, _ int) ([]histcache.Entry, bool, error) {
	h.note("After %d", conv)
	return nil, false, nil
}
func (h *recordingHot) ByMsgID(_ context.Context, conv, _ uint64) (histcache.Entry, bool, bool, error) {
	h.note("ByMsgID %d", conv)
	return histcache.Entry{}, false, false, nil
}
func (h *recordingHot) BeginFill(_ context.Context, conv uint64) (histcache.FillToken, error) {
	h.note("BeginFill %d", conv)
	return histcache.FillToken{}, nil
}
func (h *recordingHot) Fill(_ context.Context, conv uint64, _ histcache.FillToken, _ []histcache.Entry, _, _ uint64) (bool, error) {
	h.note("Fill %d", conv)
	return true, nil
}
func (h *recordingHot) BeginWrite(_ context.Context, conv uint64) (histcache.WriteToken, error) {
	h.note("BeginWrite %d", conv)
	return histcache.WriteToken{}, nil
}
func (h *recordingHot) EndWrite(_ context.Context, conv uint64, _ histcache.WriteToken, _ []histcache.Entry) error {
	h.note("EndWrite %d", conv)
	return nil
}
func (h *recordingHot) AbortWrite(_ context.Context, conv uint64, _ histcache.WriteToken) error {
	h.note("AbortWrite %d", conv)
	return nil
}
func (h *recordingHot) Invalidate(_ context.Context, conv uint64) error {
	h.note("Invalidate %d", conv)
	return nil
}
func (h *recordingHot) InvalidateAll(context.Context) error {
	h.note("InvalidateAll")
	return nil
}

// TestRampedHistoryBypassesHotTier: a history page of a conversation whose
// reads are ramped to the migration target is read there and neither asks
// nor fills the hot tier (whose rows must always be the authoritative
// side's); a conversation of the same shard outside the share asks the
// tier and is filled from the source.
func TestRampedHistoryBypassesHotTier(t *testing.T) {
	f := newRampFixture(t)
	toNew, onOld, from, newDS := f.toNew, f.onOld, f.from, f.newDS
	rec := &recorder{cols: 6}
	e := New(rec, staticRoutes{f.snap}, nil, nil, Options{})
	hot := &recordingHot{}
	e.SetHotTier(hot, 100)
	e.SetReadRamps(f.ramps)
	s := e.NewSession("im")
	page := "SELECT seq, msg_id FROM conv_msg WHERE conv_id = %d AND seq < 100 ORDER BY seq DESC LIMIT 20"

	if _, err := s.Query(fmt.Sprintf(page, toNew)); err != nil {
		t.Fatal(err)
	}
	logged := rec.take()
	if len(logged) != 1 || !strings.HasPrefix(logged[0], newDS+"#") || !strings.Contains(logged[0], "`im_new`.") {
		t.Fatalf("the ramped page did not read the target: %v", logged)
	}
	time.Sleep(50 * time.Millisecond) // a fill would run in the background
	if calls := hot.seen(); len(calls) != 0 {
		t.Fatalf("the ramped page used the hot tier: %v", calls)
	}
	if logged := rec.take(); len(logged) != 0 {
		t.Fatalf("statements after the ramped page: %v", logged)
	}

	if _, err := s.Query(fmt.Sprintf(page, onOld)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(hot.seen(), fmt.Sprintf("BeginFill %d", onOld)) {
		if time.Now().After(deadline) {
			t.Fatalf("the page outside the share was not filled: %v", hot.seen())
		}
		time.Sleep(5 * time.Millisecond)
	}
	var fills int
	for _, l := range rec.take() {
		if !strings.HasPrefix(l, from.Datasource+"#") || strings.Contains(l, "im_new") {
			t.Errorf("outside the share, a statement on %s: %s", strings.SplitN(l, "#", 2)[0], l)
		}
		if strings.Contains(l, "ORDER BY seq DESC LIMIT 100") {
			fills++
		}
	}
	if fills != 1 {
		t.Errorf("%d fill reads on the source, want 1", fills)
	}
}
