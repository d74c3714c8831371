package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// diskBackends answers SHOW SHARD HEALTH's disk-use query with the bytes
// used per datasource (a server error for a datasource not in used), and
// everything else as the recorder does.
type diskBackends struct {
	r    *recorder
	used map[string]uint64
}

func (b diskBackends) Acquire(ctx context.Context, ds string, foundRows bool) (Conn, error) {
	c, err := b.r.Acquire(ctx, ds, foundRows)
	if err != nil {
		return nil, err
	}
	used, ok := b.used[ds]
	return diskConn{c, used, ok}, nil
}

type diskConn struct {
	Conn
	used  uint64
	known bool
}

func (c diskConn) Exec(sql string) (*mysql.Result, error) {
	if !strings.Contains(sql, "information_schema.TABLES") {
		return c.Conn.Exec(sql)
	}
	if !c.known {
		return nil, &mysql.MyError{Code: 1142, State: "42000", Message: "SELECT command denied"}
	}
	rs, err := mysql.BuildSimpleResultset([]string{"bytes"}, [][]any{{c.used}}, false)
	if err != nil {
		return nil, err
	}
	return mysql.NewResult(rs), nil
}

// health runs SHOW SHARD HEALTH[ ALL] after a read on shard 0136 (conv_id
// 42) and a write on shard 0951 (conv_id 1), and returns its rows joined
// by " | ".
func health(t *testing.T, opt Options, used map[string]uint64, all bool) []string {
	t.Helper()
	rec := &recorder{cols: 2}
	s := New(diskBackends{rec, used}, staticRoutes{defaultSnapshot()}, nil, nil, opt).NewSession("im")
	defer s.Close()
	s.SetPrivileges(Privileges{Read: true, Write: true, DDL: true, Admin: true})
	for _, q := range []string{
		"SELECT seq, msg_id FROM conv_msg WHERE conv_id = 42 AND seq = 1",
		"UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 1 AND seq = 1",
	} {
		if _, err := s.Query(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	q := "/*+ convoy SHOW SHARD HEALTH */"
	if all {
		q = "/*+ convoy SHOW SHARD HEALTH ALL */"
	}
	r, err := s.Query(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	var cols []string
	for _, f := range r.Fields {
		cols = append(cols, string(f.Name))
		if f.Type != mysql.MYSQL_TYPE_VAR_STRING {
			t.Errorf("%s: column %s has type %d, want VAR_STRING", q, f.Name, f.Type)
		}
	}
	if got := strings.Join(cols, ","); got != "scope,metric,value,threshold,status,config_key" {
		t.Fatalf("%s: columns %s", q, got)
	}
	if err := decodeRows(r); err != nil {
		t.Fatal(err)
	}
	var rows []string
	for i := range r.RowNumber() {
		var cells []string
		for j := range cols {
			v, _ := r.GetString(i, j)
			cells = append(cells, v)
		}
		rows = append(rows, strings.Join(cells, " | "))
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
	healthy := Options{DiskCapacity: map[string]int64{"ds0": 1 << 30, "ds1": 1 << 30}}
	used := map[string]uint64{"ds0": 1 << 20, "ds1": 1 << 20}
	expectRows(t, "healthy, default", health(t, healthy, used, false))
	expectRows(t, "healthy, ALL", health(t, healthy, used, true),
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
	low := Options{HealthQPS: 0.5, HealthWriteP99: 1, HealthDiskPct: 50, DiskCapacity: map[string]int64{"ds0": 1000}}
	used = map[string]uint64{"ds0": 900, "ds1": 12345}
	expectRows(t, "triggers fired, default", health(t, low, used, false),
		"shard 0136 | qps | * | 0.5 | FIRED | health.shard_qps",
		"shard 0951 | qps | * | 0.5 | FIRED | health.shard_qps",
		"shard 0951 | write_p99_ms | * | 0.000 | FIRED | health.write_p99",
		"datasource ds0 | disk_pct | 90.00 | 50 | FIRED | health.disk_percent",
		"datasource ds1 | disk_bytes | 12345 | capacity not configured | unknown | health.disk_capacity",
	)
	expectRows(t, "triggers fired, ALL", health(t, low, used, true),
		"shard 0136 | qps | * | 0.5 | FIRED | health.shard_qps",
		"shard 0136 | write_p99_ms | * | 0.000 | ok | health.write_p99",
		"shard 0951 | qps | * | 0.5 | FIRED | health.shard_qps",
		"shard 0951 | write_p99_ms | * | 0.000 | FIRED | health.write_p99",
		"datasource ds0 | disk_pct | 90.00 | 50 | FIRED | health.disk_percent",
		"datasource ds1 | disk_bytes | 12345 | capacity not configured | unknown | health.disk_capacity",
	)

	// A disk query that fails is shown by default: the check was not made.
	rows := health(t, healthy, map[string]uint64{"ds0": 1 << 20}, false)
	if len(rows) != 1 || !strings.HasPrefix(rows[0], "datasource ds1 | disk_pct | error: ") || !strings.HasSuffix(rows[0], " | unknown | health.disk_percent") {
		t.Errorf("failed disk query: %q", rows)
	}
}
