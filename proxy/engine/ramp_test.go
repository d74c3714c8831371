package engine

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

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
func TestRampedReadsObserved(t *testing.T) {
	snap := defaultSnapshot()
	var inShard []uint64
	for k := uint64(1); len(inShard) < 2; k++ {
		if router.ShardOf(k) == 5 {
			inShard = append(inShard, k)
		}
	}
	toNew, onOld := inShard[0], inShard[1]
	from := snap.Target(5)
	newDS := "ds1"
	if from.Datasource == "ds1" {
		newDS = "ds0"
	}
	alt, err := router.NewSnapshot(router.MoveShard(snap.Document(), 5, newDS, "im_new", nil))
	if err != nil {
		t.Fatal(err)
	}
	ramps := &fakeRamps{shard: 5, target: map[uint64]bool{toNew: true}, alt: alt}
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
