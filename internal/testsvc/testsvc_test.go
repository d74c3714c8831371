package testsvc

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestMariaDBAndRedis(t *testing.T) {
	t0 := time.Now()
	m := StartMariaDB(t)
	t.Logf("MariaDB %s ready in %s (dir %s)", m.Addr(), time.Since(t0).Round(time.Millisecond), m.Dir())

	var cs, coll string
	var logBin int
	db := m.Open(t, "")
	if err := db.QueryRow("SELECT @@character_set_server, @@collation_connection, @@log_bin").Scan(&cs, &coll, &logBin); err != nil {
		t.Fatal(err)
	}
	if cs != "utf8mb4" || coll != "utf8mb4_general_ci" || logBin != 1 {
		t.Fatalf("character_set_server=%q collation_connection=%q log_bin=%d; want utf8mb4, utf8mb4_general_ci, 1", cs, coll, logBin)
	}
	var format string
	if err := db.QueryRow("SELECT @@binlog_format").Scan(&format); err != nil || format != "ROW" {
		t.Fatalf("binlog_format=%q err=%v; want ROW", format, err)
	}

	m.Exec(t, "CREATE DATABASE im_test",
		"CREATE TABLE im_test.t (id BIGINT UNSIGNED PRIMARY KEY, s VARCHAR(16)); INSERT INTO im_test.t VALUES (18446744073709551615, '会话')")

	// Graceful restart keeps data, same port.
	t0 = time.Now()
	m.Stop()
	m.Start()
	t.Logf("MariaDB graceful restart in %s", time.Since(t0).Round(time.Millisecond))
	checkRow(t, m)

	// Crash restart keeps committed data too.
	t0 = time.Now()
	m.Kill()
	m.Start()
	t.Logf("MariaDB kill+start in %s", time.Since(t0).Round(time.Millisecond))
	checkRow(t, m)

	r := StartRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rc.Close()
	ctx := context.Background()
	if err := rc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.FlushAll(t)
	if n, err := rc.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after FLUSHALL: exists=%d err=%v", n, err)
	}
	rc.Set(ctx, "k", "v", 0)
	r.Kill()
	r.Start()
	if n, err := rc.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after restart (no persistence): exists=%d err=%v", n, err)
	}
}

func checkRow(t *testing.T, m *MariaDB) {
	t.Helper()
	db := m.Open(t, "im_test")
	var id uint64
	var s string
	if err := db.QueryRow("SELECT id, s FROM t WHERE id = ?", uint64(18446744073709551615)).Scan(&id, &s); err != nil {
		t.Fatal(err)
	}
	if id != 18446744073709551615 || s != "会话" {
		t.Fatalf("got %d %q", id, s)
	}
}

// TestMariaDBParallel starts several instances in parallel: with the
// datadir template each costs a copy plus a server start, not an install.
func TestMariaDBParallel(t *testing.T) {
	t0 := time.Now()
	for i := 0; i < 3; i++ {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			m := StartMariaDB(t)
			m.Exec(t, "SELECT 1")
		})
	}
	t.Cleanup(func() { t.Logf("3 instances in %s", time.Since(t0).Round(time.Millisecond)) })
}

func BenchmarkStartMariaDB(b *testing.B) {
	StartMariaDB(b).Kill() // warm the template outside the timing
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		StartMariaDB(b).Kill()
	}
}
