package integration

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/convoy-im/convoy/router"
)

// queryRows returns all rows of q as strings.
func queryRows(t testing.TB, db *sql.DB, q string, args ...any) [][]string {
	t.Helper()
	rows, err := db.Query(q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out [][]string
	for rows.Next() {
		raw := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range raw {
			ptrs[i] = &raw[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		row := make([]string, len(cols))
		for i, v := range raw {
			row[i] = v.String
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return out
}

// TestAdminDirectivesAndMetrics drives the DBA directives through
// go-sql-driver and a real `mariadb -c` session, checks the admin privilege,
// and scrapes the metrics after known traffic.
func TestAdminDirectivesAndMetrics(t *testing.T) {
	s := newStack(t)
	p := startConvoy(t, s.etcd.Endpoints(), "health: {shard_qps: 0.01, disk_capacity: {ds0: 1000}}")
	admin := p.open(t, "convoy", "convoy", "im")
	app := p.open(t, "app", "app secret", "im")
	interp := "&interpolateParams=true"
	adminText := openDSN(t, p.dsn("convoy", "convoy", "im")+interp)

	for i := 0; i < 20; i++ {
		mustExec(t, app, "INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (?, 42, ?, ?, '2026-01-01 00:00:00')", i, i, i)
		mustExec(t, app, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (42, ?, ?, 1, 1, NOW())", i+1, i+1)
	}

	if _, err := app.Exec("/*+ convoy SHOW ROUTES */"); errno(err) != 1227 {
		t.Errorf("non-admin directive: %v, want 1227", err)
	}
	if _, err := admin.Exec("/*+ convoy SHOW TABLES */"); errno(err) != 1064 || !strings.Contains(err.Error(), "SHOW ROUTES") {
		t.Errorf("unknown directive: %v", err)
	}

	if rows := queryRows(t, admin, "/*+ convoy SHOW ROUTES */"); len(rows) != 1024 {
		t.Errorf("SHOW ROUTES: %d rows", len(rows))
	}
	if rows := queryRows(t, admin, "/*+ convoy SHOW ROUTES WHERE datasource = 'ds1' */"); len(rows) != 512 || rows[0][1] != "ds1" {
		t.Errorf("SHOW ROUTES WHERE datasource: %d rows, first %v", len(rows), rows[0])
	}
	rows := queryRows(t, admin, "/*+ convoy SHOW ROUTES WHERE shard = 136 */")
	if len(rows) != 1 || strings.Join(rows[0][:4], " ") != "0136 ds0 im_0 *_0128" {
		t.Errorf("SHOW ROUTES WHERE shard = 136: %v", rows)
	}
	rows = queryRows(t, admin, "/*+ convoy SHOW SHARD FOR conv_id = 42 */")
	if len(rows) != 3 || rows[0][2] != "0136" || rows[0][6] != "conv_msg_0128" {
		t.Errorf("SHOW SHARD FOR conv_id = 42: %v", rows)
	}
	rows = queryRows(t, admin, "/*+ convoy SHOW SHARD FOR uid = 18446744073709551615 */")
	if len(rows) != 2 || rows[0][2] != "0282" {
		t.Errorf("SHOW SHARD FOR uid = 2^64-1: %v", rows)
	}
	rows = queryRows(t, admin, "/*+ convoy SHOW DATASOURCES */")
	if len(rows) != 2 || rows[0][3] != "up" || rows[1][3] != "up" || rows[0][7] != "yes" || rows[0][11] != "preferred: off" {
		t.Errorf("SHOW DATASOURCES: %v", rows)
	}
	// Two proxies share this etcd: the stack's and p.
	rows = queryRows(t, admin, "/*+ convoy SHOW PROXIES */")
	listed := map[string]string{}
	for _, r := range rows {
		listed[r[1]] = r[5]
	}
	if len(rows) != 2 || listed[p.addr] != "1" || listed[s.convoy.addr] != "1" {
		t.Errorf("SHOW PROXIES: %v", rows)
	}
	if rows := queryRows(t, admin, "/*+ convoy RELOAD ROUTES */"); len(rows) != 1 || rows[0][0] != "1" {
		t.Errorf("RELOAD ROUTES: %v", rows)
	}

	// Targeting. shard=136 lives in im_0.conv_msg_0128, shared by shards 128..255.
	var direct, viaShard int
	if err := s.ds[0].Open(t, "im_0").QueryRow("SELECT COUNT(*) FROM im_inbox_0128").Scan(&direct); err != nil {
		t.Fatal(err)
	}
	if err := adminText.QueryRow("/*+ convoy shard=136 */ SELECT COUNT(*) FROM im_inbox").Scan(&viaShard); err != nil || viaShard != direct {
		t.Errorf("shard=136 COUNT: %d (err %v), direct %d", viaShard, err, direct)
	}
	var raw int
	if err := adminText.QueryRow("/*+ convoy datasource=ds1 */ SELECT COUNT(*) FROM im_1.im_inbox_0512").Scan(&raw); err != nil {
		t.Errorf("datasource=ds1 raw: %v", err)
	}
	if _, err := admin.Exec("DELETE FROM im_inbox WHERE seq < 10"); errno(err) != 1235 {
		t.Errorf("keyless DELETE without all: %v", err)
	}
	res, err := adminText.Exec("/*+ convoy all */ DELETE FROM im_inbox WHERE seq < 10")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 10 {
		t.Errorf("all DELETE affected %d rows, want 10", n)
	}
	var left int
	if err := admin.QueryRow("SELECT COUNT(*) FROM im_inbox").Scan(&left); err != nil || left != 10 {
		t.Errorf("after all DELETE: %d rows (err %v), want 10", left, err)
	}

	rows = queryRows(t, admin, "/*+ convoy SHOW SHARD STATS WHERE shard = 136 */")
	if len(rows) != 1 || rows[0][0] != "0136" || rows[0][3] == "0" {
		t.Errorf("SHOW SHARD STATS WHERE shard = 136: %v", rows)
	}
	// By default only what is wrong: FIRED rows and checks that could not
	// be made, each naming the config key to change.
	health := queryRows(t, admin, "/*+ convoy SHOW SHARD HEALTH */")
	var qpsFired, diskFired, ds1Unknown bool
	for _, r := range health {
		switch {
		case r[4] == "ok":
			t.Errorf("SHOW SHARD HEALTH lists a row that is ok: %v", r)
		case r[0] == "shard 0136" && r[1] == "qps" && r[4] == "FIRED" && r[5] == "health.shard_qps":
			qpsFired = true
		case r[0] == "datasource ds0" && r[1] == "disk_pct" && r[4] == "FIRED" && r[5] == "health.disk_percent":
			diskFired = true
		case r[0] == "datasource ds1" && r[4] == "unknown" && r[5] == "health.disk_capacity":
			ds1Unknown = true
		}
	}
	if !qpsFired || !diskFired || !ds1Unknown {
		t.Errorf("SHOW SHARD HEALTH (qps fired %v, ds0 disk fired %v, ds1 unknown %v):\n%v", qpsFired, diskFired, ds1Unknown, health)
	}
	// ALL adds the rows that are fine: shard 0136's write P99 is far below
	// the default 50 ms.
	healthAll := queryRows(t, admin, "/*+ convoy SHOW SHARD HEALTH ALL */")
	var p99ok bool
	for _, r := range healthAll {
		if r[0] == "shard 0136" && r[1] == "write_p99_ms" && r[4] == "ok" && r[5] == "health.write_p99" {
			p99ok = true
		}
	}
	if !p99ok || len(healthAll) <= len(health) {
		t.Errorf("SHOW SHARD HEALTH ALL: %d rows (default %d), shard 0136 write_p99 ok %v:\n%v", len(healthAll), len(health), p99ok, healthAll)
	}

	// The real mariadb CLI with -c keeps the directive comment.
	out := runCLI(t, p.addr, "convoy", "convoy", "/*+ convoy SHOW SHARD FOR conv_id = 42 */;\n")
	if !strings.Contains(out, "conv_msg_0128") {
		t.Errorf("mariadb -c directive:\n%s", out)
	}
	// An executable comment is SQL, routed and checked as SQL.
	if _, err := admin.Exec("/*!40000 DELETE FROM conv_msg */"); errno(err) != 1235 {
		t.Errorf("executable comment: %v", err)
	}

	body := scrape(t, p.metrics)
	for series, min := range map[string]float64{
		`convoy_shard_queries_total{kind="write",shard="0136"}`:                         20,
		`convoy_statements_total{class="admin"}`:                                        10,
		`convoy_scatter_total{table="im_inbox"}`:                                        1,
		`convoy_client_errors_total{errno="1227"}`:                                      1,
		`convoy_pool_connections{datasource="ds0",state="idle"}`:                        1,
		`convoy_route_version{cluster="it"}`:                                            1,
		`convoy_client_connections`:                                                     1,
		`convoy_datasource_query_duration_seconds_count{datasource="ds0",kind="write"}`: 20,
		`convoy_shards_over_threshold{trigger="qps"}`:                                   1,
	} {
		if v := metricValue(t, body, series); v < min {
			t.Errorf("metric %s = %v, want >= %v", series, v, min)
		}
	}

	// A read and a write on every one of the 1024 shards: the scrape stays
	// under 300 KB (it was 2.7 MB with per-shard latency histograms).
	seen := map[router.Shard]bool{}
	for k := uint64(0); len(seen) < router.NumShards; k++ {
		if sh := router.ShardOf(k); !seen[sh] {
			seen[sh] = true
			mustExec(t, app, fmt.Sprintf("SELECT COUNT(*) FROM conv_msg WHERE conv_id = %d", k))
			mustExec(t, app, fmt.Sprintf("UPDATE conv_msg SET msg_type = 1 WHERE conv_id = %d AND seq = 0", k))
		}
	}
	body = scrape(t, p.metrics)
	t.Logf("scrape after traffic on every shard: %d bytes, %d lines", len(body), strings.Count(body, "\n"))
	if len(body) > 300_000 {
		t.Errorf("scrape after traffic on every shard is %d bytes, over 300 KB", len(body))
	}
	if n := strings.Count(body, "\nconvoy_shard_queries_total{"); n != 2*router.NumShards {
		t.Errorf("%d convoy_shard_queries_total series, want %d", n, 2*router.NumShards)
	}
}
