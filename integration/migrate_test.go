package integration

import (
	"database/sql"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/migrate"
	"github.com/convoy-im/convoy/router"
)

// showMigrations returns SHOW MIGRATIONS through Convoy as column -> value
// maps (the columns are migrate.StatusColumns).
func showMigrations(t testing.TB, db *sql.DB) []map[string]string {
	t.Helper()
	var out []map[string]string
	for _, r := range queryRows(t, db, "/*+ convoy SHOW MIGRATIONS */") {
		m := map[string]string{}
		for i, c := range migrate.StatusColumns {
			m[c] = r[i]
		}
		out = append(out, m)
	}
	return out
}

// TestMigrateDirectives drives a shard migration through a Convoy process:
// the directives write the job, the migration manager every `convoy serve`
// hosts runs it (prepare, backfill, verify) with the proxy's own traffic on
// the source, SHOW MIGRATIONS and `convoy migrate status` report it, bad
// input gets 1210, and `convoy migrate rollback` removes it. The switch itself needs the engine's side of the
// migration lock (a live proxy must acknowledge it) and is tested in
// migrate/job_test.go without proxies.
func TestMigrateDirectives(t *testing.T) {
	s := newStack(t)
	db := s.convoy.open(t, "convoy", "convoy", "im")
	const shard = 5 // im_0 on ds0, table index 0 shared by shards 0..127
	var keys []uint64
	for k := uint64(1); len(keys) < 50; k++ {
		if router.ShardOf(k) == shard {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if _, err := db.Exec("INSERT INTO im_conv_seq (conv_id, max_seq, member_cnt) VALUES (?, 0, 2)", k); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if _, err := db.Exec("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 7, 1, NOW(3))", k, k*100+uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
	}

	for _, c := range []struct{ sql, want string }{
		{"/*+ convoy MIGRATE SHARD 5 TO ds9 */", `unknown datasource "ds9"`},
		{"/*+ convoy MIGRATE SHARD 5 TO ds0 */", "shard 5 is already on ds0.im_0"},
		{"/*+ convoy MIGRATION 5 NEXT */", "shard 5 has no migration job"},
	} {
		_, err := db.Exec(c.sql)
		if errno(err) != 1210 || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v, want 1210 saying %q", c.sql, err, c.want)
		}
	}
	app := s.convoy.open(t, "app", "app secret", "im")
	if _, err := app.Exec("/*+ convoy SHOW MIGRATIONS */"); errno(err) != 1227 {
		t.Fatalf("SHOW MIGRATIONS as a non-admin: %v, want 1227", err)
	}

	if _, err := db.Exec("/*+ convoy MIGRATE SHARD 5 TO ds1 DATABASE im_mig RATE 500 */"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("/*+ convoy MIGRATE SHARD 5 TO ds1 */"); errno(err) != 1210 || !strings.Contains(err.Error(), "already has a migration job") {
		t.Fatalf("a second MIGRATE: %v", err)
	}
	// Writes through Convoy during the backfill.
	for i, k := range keys[:10] {
		if _, err := db.Exec("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 7, 1, NOW(3))", k, k*100+50+uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	var last map[string]string
	for {
		ms := showMigrations(t, db)
		if len(ms) != 1 {
			t.Fatalf("SHOW MIGRATIONS: %v", ms)
		}
		last = ms[0]
		if last["step"] == "ready" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job did not become ready within a minute: %v\n%s", last, s.convoy.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last["shard"] != "0005" || last["from"] != "ds0.im_0" || last["to"] != "ds1.im_mig" ||
		!strings.HasPrefix(last["checksum"], "equal") || last["runner"] == "" || last["last_error"] != "" {
		t.Fatalf("SHOW MIGRATIONS row: %v", last)
	}
	src, dst := s.ds[0].Open(t, ""), s.ds[1].Open(t, "")
	const q = "SELECT COUNT(*) FROM %s.conv_msg_0000 WHERE CRC32(conv_id) %% 1024 = ?"
	var n, m int
	if err := src.QueryRow(fmt.Sprintf(q, "im_0"), shard).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := dst.QueryRow(fmt.Sprintf(q, "im_mig"), shard).Scan(&m); err != nil {
		t.Fatal(err)
	}
	if n != 160 || m != n {
		t.Fatalf("conv_msg rows of shard %d: %d on the source (want 160), %d on the target", shard, n, m)
	}

	// The shell's view and commands are the same records.
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(convoyBin, append([]string{"migrate", "--etcd", strings.Join(s.etcd.Endpoints(), ","), "--cluster", testCluster}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("convoy migrate %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := cli("status"); !strings.Contains(out, "0005") || !strings.Contains(out, "ds1.im_mig") || !strings.Contains(out, " ready ") {
		t.Fatalf("convoy migrate status:\n%s", out)
	}
	cli("rollback", "5")
	for len(showMigrations(t, db)) != 0 {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatalf("the job is still listed after ROLLBACK: %v", showMigrations(t, db))
		}
		time.Sleep(100 * time.Millisecond)
	}
	var tables int
	if err := dst.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'im_mig' AND TABLE_NAME NOT LIKE '\\_convoy%'").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("the rolled-back job left %d tables in im_mig", tables)
	}
}
