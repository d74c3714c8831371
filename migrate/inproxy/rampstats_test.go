package inproxy

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/convoy-im/convoy/migrate/internal/jobrec"
	"github.com/convoy-im/convoy/router"
)

func rampSnapshot(t *testing.T) *router.Snapshot {
	t.Helper()
	doc, err := router.SharedLayout([]router.Datasource{{Name: "ds0", Addr: "a:1"}, {Name: "ds1", Addr: "b:1"}}, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := router.NewSnapshot(doc)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// rampSeries returns the ramp read counters of reg by "shard side result",
// and the number of latency histograms.
func rampSeries(t *testing.T, reg *prometheus.Registry) (map[string]float64, int) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts, hists := map[string]float64{}, 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			switch mf.GetName() {
			case MetricRampReads:
				counts[l["shard"]+" "+l["side"]+" "+l["result"]] = m.GetCounter().GetValue()
			case MetricRampLatency:
				hists++
			}
		}
	}
	return counts, hists
}

// rampReads asks r about every key as the engine does and records a read
// on the side it names, failing the first failNew reads of the target. It
// returns the reads per side.
func rampReads(t *testing.T, r *Ramps, snap *router.Snapshot, keys []uint64, failNew int) (old, new int) {
	t.Helper()
	for _, k := range keys {
		alt, ramped := r.ReadSnapshot(snap, router.ShardOf(k), k)
		if !ramped {
			t.Fatalf("key %d of a ramped shard: not ramped", k)
		}
		var err error
		if alt != nil {
			new++
			if new <= failNew {
				err = errors.New("table gone")
			}
		} else {
			old++
		}
		r.ObserveRead(router.ShardOf(k), alt != nil, 3*time.Millisecond, err)
	}
	return old, new
}

// TestRampStats: the reads of a ramped shard are counted by the side they
// went to (the lag fallback counts on the source), in Prometheus and in the
// figures a proxy publishes; a shard not ramped is not counted; the series
// and figures go when the ramp ends, and a new ramp starts from zero.
func TestRampStats(t *testing.T) {
	snap := rampSnapshot(t)
	reg := prometheus.NewRegistry()
	r, err := NewRamps(reg)
	if err != nil {
		t.Fatal(err)
	}
	keys := keysOfShard(5, 200, 1)
	if _, ramped := r.ReadSnapshot(snap, 5, keys[0]); ramped {
		t.Fatal("ramped with no job")
	}
	r.ObserveRead(5, true, time.Millisecond, nil) // no ramp: ignored
	r.Update(5, rampJob(jobrec.StepReady, 50, 0))
	announceAll(r)
	if _, ramped := r.ReadSnapshot(snap, 6, keysOfShard(6, 1, 1)[0]); ramped {
		t.Fatal("shard 6 is ramped")
	}
	old, new := rampReads(t, r, snap, keys, 3)
	if old < 60 || new < 60 {
		t.Fatalf("%d old, %d new reads at 50%%", old, new)
	}
	// The runner reports a lag over the bound: every read on the source,
	// counted in the same ramp.
	r.Update(5, rampJob(jobrec.StepReady, 50, 2))
	old2, new2 := rampReads(t, r, snap, keys[:10], 0)
	if old2 != 10 || new2 != 0 {
		t.Fatalf("lagging target: %d old, %d new", old2, new2)
	}
	old += old2

	counts, hists := rampSeries(t, reg)
	want := map[string]float64{"0005 old ok": float64(old), "0005 old error": 0, "0005 new ok": float64(new - 3), "0005 new error": 3}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("%s = %g, want %g (all: %v)", k, counts[k], v, counts)
		}
	}
	if len(counts) != 4 || hists != 2 {
		t.Errorf("series %v and %d histograms, want 4 counters and 2 histograms of shard 5", counts, hists)
	}
	rep := r.report()
	got := rep["0005"]
	if len(rep) != 1 || got.Old.Count != uint64(old) || got.Old.Errors != 0 || got.New.Count != uint64(new) || got.New.Errors != 3 {
		t.Fatalf("published figures %+v, want %d old, %d new with 3 errors", rep, old, new)
	}
	// Two proxies' figures add up in SHOW MIGRATIONS' columns.
	tot := RampTotals{}
	for range 2 {
		s := tot[5]
		s.Old.Add(got.Old)
		s.New.Add(got.New)
		tot[5] = s
	}
	cells := tot.Cells(5)
	p99 := got.New.Percentile(0.99)
	if p99 < 2700*time.Microsecond || p99 > 3300*time.Microsecond {
		t.Fatalf("P99 %s of 3 ms reads", p99)
	}
	wantCells := []string{itoa(2 * old), "0.00", cells[2], itoa(2 * new), formatPct(6, 2*new), cells[5]}
	if !slices.Equal(cells, wantCells) || cells[2] != cells[5] || cells[2] == "" {
		t.Fatalf("cells %v, want %v", cells, wantCells)
	}
	if c := tot.Cells(6); !slices.Equal(c, make([]string, len(RampColumns))) {
		t.Fatalf("a shard without figures has cells %v", c)
	}

	r.Update(5, nil)
	if counts, hists := rampSeries(t, reg); len(counts) != 0 || hists != 0 || r.report() != nil {
		t.Fatalf("after the ramp: series %v, %d histograms, figures %v", counts, hists, r.report())
	}
	r.Update(5, rampJob(jobrec.StepReady, 10, 0))
	announceAll(r)
	if counts, _ := rampSeries(t, reg); counts["0005 new error"] != 0 || counts["0005 old ok"] != 0 || r.report()["0005"].Old.Count != 0 {
		t.Fatalf("a new ramp starts with %v", counts)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func formatPct(errs, n int) string {
	return strconv.FormatFloat(100*float64(errs)/float64(n), 'f', 2, 64)
}

// BenchmarkObserveRead is the cost a ramped read adds after its backend
// answered (BENCHMARKS.md).
func BenchmarkObserveRead(b *testing.B) {
	r, err := NewRamps(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	r.Update(5, rampJob(jobrec.StepReady, 50, 0))
	announceAll(r)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			r.ObserveRead(5, i&1 == 0, time.Duration(i%5000)*time.Microsecond, nil)
		}
	})
}
