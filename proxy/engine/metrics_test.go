package engine

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"

	"github.com/convoy-im/convoy/router"
)

// keyPerShard returns a conv_id on each logical shard.
func keyPerShard() []uint64 {
	keys := make([]uint64, router.NumShards)
	found := 0
	seen := make([]bool, router.NumShards)
	for k := uint64(0); found < router.NumShards; k++ {
		if sh := router.ShardOf(k); !seen[sh] {
			seen[sh] = true
			keys[sh] = k
			found++
		}
	}
	return keys
}

// scrapeText renders reg as a Prometheus text scrape.
func scrapeText(t *testing.T, reg prometheus.Gatherer) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

func countPrefix(body, prefix string) int {
	n := 0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// Budget of one process's scrape, and what this test leaves of it for the
// series registered outside the engine (client connections and errors,
// pools, routes, hot tier): 2.2 KB in the integration scrape without the hot
// tier, whose ten Redis operations add about 15 KB
// (TestAdminDirectivesAndMetrics checks a whole real scrape).
const (
	scrapeBudget    = 300_000
	scrapeElsewhere = 30_000
)

// TestScrapeSizeAllShards: after reads, writes and failures on all 1024
// shards, the engine's series and the Go runtime's fit the scrape budget. It
// failed at 2.7 MB with per-shard latency histograms.
func TestScrapeSizeAllShards(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rec := &recorder{cols: 2}
	m := NewMetrics(reg)
	e := New(rec, staticRoutes{defaultSnapshot()}, m, nil, Options{})
	s := e.NewSession("im")
	defer s.Close()
	run := func(q string, fail bool) {
		t.Helper()
		if _, err := s.Query(q); (err != nil) != fail {
			t.Fatalf("%s: error %v, want failure %v", q, err, fail)
		}
	}
	rec.failOn = "=999999"
	for _, k := range keyPerShard() {
		run(fmt.Sprintf("SELECT seq, msg_id FROM conv_msg WHERE conv_id = %d AND seq = 1", k), false)
		run(fmt.Sprintf("UPDATE conv_msg SET msg_type = 2 WHERE conv_id = %d AND seq = 1", k), false)
		run(fmt.Sprintf("SELECT seq, msg_id FROM conv_msg WHERE conv_id = %d AND seq = 999999", k), true)
		run(fmt.Sprintf("UPDATE conv_msg SET msg_type = 2 WHERE conv_id = %d AND seq = 999999", k), true)
		rec.take()
	}
	body := scrapeText(t, reg)
	for prefix, want := range map[string]int{
		"convoy_shard_queries_total{":                                      2 * router.NumShards,
		"convoy_shard_errors_total{":                                       router.NumShards,
		`convoy_shard_queries_total{kind="write",shard="1023"} 2`:          1,
		`convoy_shard_errors_total{shard="0000"} 2`:                        1,
		"convoy_datasource_query_duration_seconds_count{":                  4, // ds0, ds1 x read, write
		`convoy_datasource_query_duration_seconds_count{datasource="ds1",`: 2,
		"convoy_datasource_errors_total{":                                  4,
		`convoy_shards_over_threshold{trigger="qps"} 0`:                    1,
		"convoy_shard_write_p99_max_seconds ":                              1,
		"convoy_shard_query_duration_seconds":                              0,
	} {
		if got := countPrefix(body, prefix); got != want {
			t.Errorf("%d lines start with %s, want %d", got, prefix, want)
		}
	}
	sum := func(series ...string) (total float64) {
		for _, name := range series {
			var v float64
			if _, err := fmt.Sscan(valueOf(body, name), &v); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			total += v
		}
		return total
	}
	if n := sum(`convoy_datasource_query_duration_seconds_count{datasource="ds0",kind="read"}`,
		`convoy_datasource_query_duration_seconds_count{datasource="ds1",kind="read"}`); n != 2*router.NumShards {
		t.Errorf("datasource histograms count %v reads, want %d", n, 2*router.NumShards)
	}
	if n := sum(`convoy_datasource_errors_total{datasource="ds0",kind="write"}`,
		`convoy_datasource_errors_total{datasource="ds1",kind="write"}`); n != router.NumShards {
		t.Errorf("datasource error counters count %v failed writes, want %d", n, router.NumShards)
	}

	// A process up for weeks: counters in the billions print as
	// 1.234567891e+09, 14 bytes more a line than the 2 above.
	for sh := range router.NumShards {
		ss := m.shard(router.Shard(sh))
		ss.count[0].Add(float64(1_234_567_891 + sh))
		ss.count[1].Add(float64(1_234_567_891 + sh))
		ss.errors.Add(float64(1_234_567 + sh))
	}
	body = scrapeText(t, reg)
	t.Logf("scrape: %d bytes, %d lines", len(body), strings.Count(body, "\n"))
	if len(body) > scrapeBudget-scrapeElsewhere {
		t.Errorf("scrape after traffic on every shard is %d bytes, over %d (budget %d less %d for the other packages)",
			len(body), scrapeBudget-scrapeElsewhere, scrapeBudget, scrapeElsewhere)
	}
}

// valueOf returns the value of series in a text scrape ("" if absent).
func valueOf(body, series string) string {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}

// TestTriggerGauges: the scrape counts shards over SHOW SHARD HEALTH's
// triggers by the same rules as the directive.
func TestTriggerGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	rec := &recorder{cols: 2}
	e := New(rec, staticRoutes{defaultSnapshot()}, NewMetrics(reg), nil, Options{HealthQPS: 0.5, HealthWriteP99: 1})
	body := scrapeText(t, reg)
	for _, series := range []string{`convoy_shards_over_threshold{trigger="qps"}`, `convoy_shards_over_threshold{trigger="write_p99"}`, "convoy_shard_write_p99_max_seconds"} {
		if v := valueOf(body, series); v != "0" {
			t.Errorf("idle: %s = %q, want 0", series, v)
		}
	}
	s := e.NewSession("im")
	defer s.Close()
	for _, q := range []string{
		"SELECT seq, msg_id FROM conv_msg WHERE conv_id = 42 AND seq = 1",
		"UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 1 AND seq = 1",
	} {
		if _, err := s.Query(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	body = scrapeText(t, reg)
	if v := valueOf(body, `convoy_shards_over_threshold{trigger="qps"}`); v != "2" {
		t.Errorf("shards over qps = %q, want 2", v)
	}
	// Only the written shard has a write P99.
	if v := valueOf(body, `convoy_shards_over_threshold{trigger="write_p99"}`); v != "1" {
		t.Errorf("shards over write_p99 = %q, want 1", v)
	}
	var p99 float64
	if _, err := fmt.Sscan(valueOf(body, "convoy_shard_write_p99_max_seconds"), &p99); err != nil || p99 <= 0 || p99 > 1 {
		t.Errorf("convoy_shard_write_p99_max_seconds = %v (%v), want a small positive number", p99, err)
	}
}
