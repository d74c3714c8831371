package search

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/convoy-im/convoy/binlog"
)

// The feed-lag gauge keeps moving while a feed applies nothing (a dead
// stream), drops to zero when the feed idles connected, is not exported
// for a feed this process stopped, and goes on from where it stopped when
// the feed runs here again.
func TestFeedBehindMoves(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	behind := func() (float64, bool) {
		v, ok := m.Behind()["ds0"]
		return v, ok
	}
	m.started("ds0")
	time.Sleep(60 * time.Millisecond)
	a, ok := behind()
	time.Sleep(60 * time.Millisecond)
	b, _ := behind()
	if !ok || a < 0.05 || b < a+0.05 {
		t.Fatalf("a feed applying nothing: behind %.3f then %.3f s, want growing", a, b)
	}
	if n := testutil.CollectAndCount(reg, "convoy_search_feed_behind_seconds"); n != 1 {
		t.Fatalf("%d series exported, want 1", n)
	}
	m.caughtUp("ds0", binlog.Stats{Connected: true})
	if v, _ := behind(); v > 0.05 {
		t.Fatalf("a caught-up feed: behind %.3f s", v)
	}
	m.applied("ds0", Batch{}, 0, []time.Time{time.Now().Add(-3 * time.Second)})
	if v, _ := behind(); v < 3 || v > 4 {
		t.Fatalf("after a transaction committed 3 s ago: behind %.3f s", v)
	}
	m.stopped("ds0")
	if _, ok := behind(); ok {
		t.Fatal("a stopped feed still exports its lag")
	}
	if n := testutil.CollectAndCount(reg, "convoy_search_feed_behind_seconds"); n != 0 {
		t.Fatalf("%d series exported for a stopped feed", n)
	}
	m.started("ds0")
	if v, _ := behind(); v < 3 {
		t.Fatalf("the feed restarted here: behind %.3f s, want it to go on from 3 s", v)
	}
}
