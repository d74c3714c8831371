package inproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/proxy/stats"
	"github.com/convoy-im/convoy/router"
)

// Per-side figures of the read ramp (step 5, docs/design.md §5:
// "重点看错误率与 P99"): while a shard is in a read ramp, every proxy counts the reads the
// ramp decides (single-key reads outside transactions, the ones
// ReadSnapshot is asked about) by the side they went to: old (the source,
// authoritative) or new (the target). Prometheus gets counters and a
// latency histogram per shard and side, which exist only while the shard is
// ramped; SHOW MIGRATIONS gets the last RampStatsWindow of every live
// proxy, summed: each proxy publishes its window every RampPublishEvery
// under its registration lease (coord.RampStatsKey), so a dead proxy's
// figures go with it.

// Metric names of the read ramp's per-side reads.
const (
	MetricRampReads   = "convoy_migration_ramp_reads_total"
	MetricRampLatency = "convoy_migration_ramp_read_duration_seconds"
)

const (
	// RampStatsWindow is the span of SHOW MIGRATIONS' per-side columns.
	RampStatsWindow = time.Minute
	// RampPublishEvery is how often a proxy publishes its figures while
	// ramps exist: one etcd write per proxy, however many shards ramp.
	RampPublishEvery = 5 * time.Second
)

// RampColumns are SHOW MIGRATIONS' per-side columns of the read ramp, over
// the last RampStatsWindow on every live proxy: reads, the share that
// failed (percent), P99 in milliseconds; old is the source, new the target.
var RampColumns = []string{"old_reads", "old_err_pct", "old_p99_ms", "new_reads", "new_err_pct", "new_p99_ms"}

// Sides of a ramped read, as indexes and label values.
const (
	sideOld = 0
	sideNew = 1
)

var sideNames = [2]string{"old", "new"}

type rampMetrics struct {
	reads   *prometheus.CounterVec   // shard, side, result (ok|error)
	latency *prometheus.HistogramVec // shard, side
}

func newRampMetrics(reg prometheus.Registerer) (rampMetrics, error) {
	m := rampMetrics{
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRampReads,
			Help: "Reads of a shard in a read ramp, by side (old: the source, new: the migration target) and result (ok|error); only while the shard is ramped."},
			[]string{"shard", "side", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricRampLatency,
			Help: "Backend time of the reads of a shard in a read ramp, by side (old|new); only while the shard is ramped.",
			// The engine's datasource buckets: the two sides compare with
			// the rest of the fleet.
			Buckets: []float64{.00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 2},
		}, []string{"shard", "side"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.reads, m.latency} {
			if err := reg.Register(c); err != nil {
				return rampMetrics{}, err
			}
		}
	}
	return m, nil
}

// rampStats are one ramped shard's reads by side. The series are resolved
// once, at the ramp's start, so a read hashes no label.
type rampStats struct {
	shard   router.Shard
	window  [2]*stats.Window // by side, the shard's reads (kind read)
	ok      [2]prometheus.Counter
	failed  [2]prometheus.Counter
	latency [2]prometheus.Observer
}

// startStats begins counting shard sh's reads, unless they are counted
// already (a new status of the same ramp). Called under r.mu.
func (r *Ramps) startStats(sh router.Shard) {
	if r.stats[sh].Load() != nil {
		return
	}
	label := sh.String()
	s := &rampStats{shard: sh}
	for i, side := range sideNames {
		s.window[i] = stats.New(RampStatsWindow, nil)
		s.ok[i] = r.metrics.reads.WithLabelValues(label, side, "ok")
		s.failed[i] = r.metrics.reads.WithLabelValues(label, side, "error")
		s.latency[i] = r.metrics.latency.WithLabelValues(label, side)
	}
	r.stats[sh].Store(s)
}

// endStats drops shard sh's figures and series: its ramp ended. A read
// recorded concurrently lands in the dropped series, which nothing exports.
// Called under r.mu.
func (r *Ramps) endStats(sh router.Shard) {
	if r.stats[sh].Swap(nil) == nil {
		return
	}
	r.metrics.reads.DeletePartialMatch(prometheus.Labels{"shard": sh.String()})
	r.metrics.latency.DeletePartialMatch(prometheus.Labels{"shard": sh.String()})
}

// ObserveRead implements engine.ReadRamps: one read of shard sh on the
// target (or the source), its backend time and error. Lock-free.
func (r *Ramps) ObserveRead(sh router.Shard, target bool, d time.Duration, err error) {
	if int(sh) >= len(r.stats) {
		return
	}
	s := r.stats[sh].Load()
	if s == nil {
		return // the ramp ended meanwhile
	}
	i := sideOld
	if target {
		i = sideNew
	}
	s.window[i].Record(sh, false, d, err != nil)
	s.latency[i].Observe(d.Seconds())
	if err != nil {
		s.failed[i].Inc()
	} else {
		s.ok[i].Inc()
	}
}

// rampSides are one shard's reads over the window, by side: what a proxy
// publishes and SHOW MIGRATIONS sums.
type rampSides struct {
	Old stats.Summary `json:"old"`
	New stats.Summary `json:"new"`
}

// report returns this proxy's figures by shard (as four digits, the job
// keys' form), nil when no shard is ramped.
func (r *Ramps) report() map[string]rampSides {
	var out map[string]rampSides
	for sh := range r.stats {
		s := r.stats[sh].Load()
		if s == nil {
			continue
		}
		if out == nil {
			out = map[string]rampSides{}
		}
		out[s.shard.String()] = rampSides{Old: s.window[sideOld].Summary(s.shard, false), New: s.window[sideNew].Summary(s.shard, false)}
	}
	return out
}

// RampStatsWriter writes keys that live as long as the proxy's
// registration: coord.Registration.
type RampStatsWriter interface {
	Put(ctx context.Context, key, value string) error
	Delete(ctx context.Context, key string) error
}

// PublishStats writes this proxy's figures to key every period while any
// shard is ramped, and deletes them once none is, until ctx ends. It
// writes even when nothing changed: a key lost with an expired lease comes
// back at the next write.
func (r *Ramps) PublishStats(ctx context.Context, w RampStatsWriter, key string, every time.Duration, log *zap.Logger) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	published := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rep := r.report()
		wctx, cancel := context.WithTimeout(ctx, every)
		var err error
		switch {
		case rep != nil:
			b, _ := json.Marshal(rep) // plain structs: cannot fail
			if err = w.Put(wctx, key, string(b)); err == nil {
				published = true
			}
		case published:
			if err = w.Delete(wctx, key); err == nil {
				published = false
			}
		}
		cancel()
		if err != nil && ctx.Err() == nil {
			log.Debug("read ramps: publishing this proxy's per-side reads", zap.String("key", key), zap.Error(err))
		}
	}
}

// RampTotals are the figures of every live proxy, summed by shard: what
// SHOW MIGRATIONS shows (migrate.Admin).
type RampTotals map[int]rampSides

// ReadRampTotals sums the figures every live proxy published.
func ReadRampTotals(ctx context.Context, cli *clientv3.Client, cluster string) (RampTotals, error) {
	prefix := coord.RampStatsPrefix(cluster)
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read ramp figures under %s: %w", prefix, err)
	}
	out := RampTotals{}
	for _, kv := range resp.Kvs {
		var rep map[string]rampSides
		if json.Unmarshal(kv.Value, &rep) != nil {
			continue // one broken value must not hide the others
		}
		for k, v := range rep {
			sh, err := strconv.Atoi(k)
			if err != nil {
				continue
			}
			t := out[sh]
			t.Old.Add(v.Old)
			t.New.Add(v.New)
			out[sh] = t
		}
	}
	return out, nil
}

// Cells are shard's RampColumns ("" where no proxy published its ramp).
func (t RampTotals) Cells(shard int) []string {
	s, ok := t[shard]
	if !ok {
		return make([]string, len(RampColumns))
	}
	var out []string
	for _, side := range []stats.Summary{s.Old, s.New} {
		errPct, p99 := "", ""
		if side.Count > 0 {
			errPct = strconv.FormatFloat(100*float64(side.Errors)/float64(side.Count), 'f', 2, 64)
			p99 = strconv.FormatFloat(float64(side.Percentile(0.99))/float64(time.Millisecond), 'f', 2, 64)
		}
		out = append(out, strconv.FormatUint(side.Count, 10), errPct, p99)
	}
	return out
}
