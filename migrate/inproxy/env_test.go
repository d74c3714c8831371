package inproxy_test

import (
	"context"
	"database/sql"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/migrate"
	"github.com/convoy-im/convoy/router"
	"github.com/convoy-im/convoy/schema"
)

// The tests of package inproxy_test (dualwrite_test.go, mirror_test.go,
// rampstats_admin_test.go) also run package migrate's side: the job's
// binlog apply, which the dual-write and the queue's replay wait for, and
// SHOW MIGRATIONS, which sums the proxies' ramp figures. migrate imports
// inproxy, so only an external test package can import both. The helpers
// below are copies of package migrate's test helpers, which a test of
// another package cannot reach.

// imTable is the CREATE TABLE of a logical table as db.physical.
func imTable(t testing.TB, logical, db, physical string) string {
	t.Helper()
	stmt, err := schema.Table(logical, db, physical)
	if err != nil {
		t.Fatal(err)
	}
	return stmt
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// connect is the Connector of the tests: root without a password.
func connect(_ context.Context, ds router.Datasource) (*sql.DB, binlog.Config, error) {
	db, err := sql.Open("mysql", "root@tcp("+ds.Addr+")/?collation=utf8mb4_general_ci&interpolateParams=false&timeout=5s")
	return db, binlog.Config{Addr: ds.Addr, User: ds.User}, err
}

// readerIDs numbers the tests' binlog readers (replica server ids).
var readerIDs atomic.Uint32

// runApplier runs a.Run in the background; stop cancels it and returns
// Run's error.
func runApplier(t *testing.T, ctx context.Context, a *migrate.Applier, origin binlog.Position) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		err := a.Run(ctx, origin)
		if ctx.Err() == nil {
			// Ended by itself: say so now, a test waiting on the apply
			// would otherwise only time out.
			t.Logf("the applier stopped by itself: %v (stats %+v)", err, a.Stats())
		}
		done <- err
	}()
	var err error
	stopped := false
	stop = func() error {
		if !stopped {
			cancel()
			err = <-done
			stopped = true
		}
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

func currentPosition(t *testing.T, db *sql.DB) binlog.Position {
	t.Helper()
	p, err := binlog.CurrentPosition(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// insert writes rows with multi-row parameterised INSERTs.
func insert(t *testing.T, db *sql.DB, table string, cols []string, rows [][]any) {
	t.Helper()
	for len(rows) > 0 {
		n := min(len(rows), 200)
		one := "(" + strings.TrimSuffix(strings.Repeat("?,", len(cols)), ",") + ")"
		var args []any
		for _, r := range rows[:n] {
			args = append(args, r...)
		}
		q := "INSERT INTO " + table + " (" + strings.Join(cols, ",") + ") VALUES " + strings.TrimSuffix(strings.Repeat(one+",", n), ",")
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		rows = rows[n:]
	}
}

func count(t *testing.T, db *sql.DB, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}
