package admin

import (
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/router"
)

// health runs SHOW SHARD HEALTH[ ALL] after a read on shard 0136 (conv_id
// 42) and a write on shard 0951 (conv_id 1), and returns its rows joined
// by " | ".
func health(t *testing.T, e *fakeEngine, c Config, all bool) []string {
	t.Helper()
	e.window.Record(router.ShardOf(42), false, time.Millisecond, false)
	e.window.Record(router.ShardOf(1), true, time.Millisecond, false)
	q := "/*+ convoy SHOW SHARD HEALTH */"
	if all {
		q = "/*+ convoy SHOW SHARD HEALTH ALL */"
	}
	r, err := query(t, New(e, c), &fakeSession{admin: true}, q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	cols, rows := rows(t, r)
	if cols != "scope,metric,value,threshold,status,config_key" {
		t.Fatalf("%s: columns %s", q, cols)
	}
	return rows
}

func expectRows(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	// The latencies and QPS are measured: compare scope, metric, status and
	// key, and the values only where they are fixed.
	norm := func(rows []string) string {
		var out []string
		for _, r := range rows {
			c := strings.Split(r, " | ")
			if len(c) == 6 && (c[1] == "qps" || c[1] == "write_p99_ms") {
				c[2] = "*"
			}
			out = append(out, strings.Join(c, " | "))
		}
		return strings.Join(out, "\n")
	}
	if norm(got) != strings.Join(want, "\n") {
		t.Errorf("%s:\n%s\nwant:\n%s", what, norm(got), strings.Join(want, "\n"))
	}
}

func TestShardHealthShowsWhatIsWrong(t *testing.T) {
	// Default thresholds, capacities configured, disks nearly empty: nothing
	// is wrong, so the default answer is an empty set with the columns.
	healthy := Config{DiskCapacity: map[string]int64{"ds0": 1 << 30, "ds1": 1 << 30}}
	e := newFakeEngine()
	e.used = map[string]uint64{"ds0": 1 << 20, "ds1": 1 << 20}
	expectRows(t, "healthy, default", health(t, e, healthy, false))
	// The disk use is asked of every datasource for its databases, each
	// query bounded; the directive is counted.
	const disk = "SELECT CAST(COALESCE(SUM(data_length + index_length + data_free), 0) AS UNSIGNED) FROM information_schema.TABLES WHERE table_schema IN "
	if got, want := strings.Join(e.take(), "\n"), strings.Join([]string{
		"count admin",
		"query ds0 2s: " + disk + "('im_0','im_1','im_2','im_3')",
		"query ds1 2s: " + disk + "('im_4','im_5','im_6','im_7')",
	}, "\n"); got != want {
		t.Errorf("engine calls:\n%s\nwant:\n%s", got, want)
	}
	expectRows(t, "healthy, ALL", health(t, e, healthy, true),
		"shard 0136 | qps | * | 3000 | ok | health.shard_qps",
		"shard 0136 | write_p99_ms | * | 50.000 | ok | health.write_p99",
		"shard 0951 | qps | * | 3000 | ok | health.shard_qps",
		"shard 0951 | write_p99_ms | * | 50.000 | ok | health.write_p99",
		"datasource ds0 | disk_pct | 0.10 | 60 | ok | health.disk_percent",
		"datasource ds1 | disk_pct | 0.10 | 60 | ok | health.disk_percent",
	)

	// Every trigger low: both shards over QPS, the written one over write
	// P99 (the read-only one has no write P99), ds0 over disk; ds1 has no
	// capacity, so its check cannot be made and the row says which key to set.
	low := Config{DiskPercent: 50, DiskCapacity: map[string]int64{"ds0": 1000}}
	lowEngine := func() *fakeEngine {
		e := newFakeEngine()
		e.qps, e.writeP99 = 0.5, 1
		e.used = map[string]uint64{"ds0": 900, "ds1": 12345}
		return e
	}
	expectRows(t, "triggers fired, default", health(t, lowEngine(), low, false),
		"shard 0136 | qps | * | 0.5 | FIRED | health.shard_qps",
		"shard 0951 | qps | * | 0.5 | FIRED | health.shard_qps",
		"shard 0951 | write_p99_ms | * | 0.000 | FIRED | health.write_p99",
		"datasource ds0 | disk_pct | 90.00 | 50 | FIRED | health.disk_percent",
		"datasource ds1 | disk_bytes | 12345 | capacity not configured | unknown | health.disk_capacity",
	)
	expectRows(t, "triggers fired, ALL", health(t, lowEngine(), low, true),
		"shard 0136 | qps | * | 0.5 | FIRED | health.shard_qps",
		"shard 0136 | write_p99_ms | * | 0.000 | ok | health.write_p99",
		"shard 0951 | qps | * | 0.5 | FIRED | health.shard_qps",
		"shard 0951 | write_p99_ms | * | 0.000 | FIRED | health.write_p99",
		"datasource ds0 | disk_pct | 90.00 | 50 | FIRED | health.disk_percent",
		"datasource ds1 | disk_bytes | 12345 | capacity not configured | unknown | health.disk_capacity",
	)

	// A disk query that fails is shown by default: the check was not made.
	e = newFakeEngine()
	e.used = map[string]uint64{"ds0": 1 << 20}
	rows := health(t, e, healthy, false)
	if len(rows) != 1 || rows[0] != "datasource ds1 | disk_pct | error: ERROR 1142 (42000): SELECT command denied | 60 | unknown | health.disk_percent" {
		t.Errorf("failed disk query: %q", rows)
	}
}
