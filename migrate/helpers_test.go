package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/router"
	"github.com/convoy-im/convoy/schema"
)

// env is a source and a target MariaDB shared by the subtests of
// TestMariaDB; each subtest works in databases of its own.
type env struct {
	src, dst *testsvc.MariaDB
	sdb, ddb *sql.DB
	// soleApply: the tests' appliers write binlog images, as the target's
	// only writer (Applier.SetSoleWriter), where a test supports it.
	soleApply bool
}

// applyMode puts a into the env's apply mode.
func (e *env) applyMode(t *testing.T, a *Applier) {
	t.Helper()
	if err := a.SetSoleWriter(t.Context(), e.soleApply); err != nil {
		t.Fatal(err)
	}
}

func newEnv(t *testing.T) *env {
	src, dst := testsvc.StartMariaDB(t), testsvc.StartMariaDB(t)
	return &env{src: src, dst: dst, sdb: src.Open(t, ""), ddb: dst.Open(t, "")}
}

// database creates db on both servers.
func (e *env) database(t *testing.T, db string) {
	t.Helper()
	e.src.Exec(t, "CREATE DATABASE "+db)
	e.dst.Exec(t, "CREATE DATABASE "+db)
}

// both runs DDL on both servers.
func (e *env) both(t *testing.T, stmts ...string) {
	t.Helper()
	e.src.Exec(t, stmts...)
	e.dst.Exec(t, stmts...)
}

func (e *env) sides(db, table string) (Side, Side) {
	return Side{DB: e.sdb, Database: db, Table: table}, Side{DB: e.ddb, Database: db, Table: table}
}

// imTable is the CREATE TABLE of a logical table as db.physical.
func imTable(t testing.TB, logical, db, physical string) string {
	t.Helper()
	stmt, err := schema.Table(logical, db, physical)
	if err != nil {
		t.Fatal(err)
	}
	return stmt
}

// keysOfShard returns n keys from `from` upwards whose shard is sh.
func keysOfShard(sh router.Shard, n int, from uint64) []uint64 { return router.KeysOf(sh, n, from) }

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

// dump renders every row of table (of shard f when f is set) with each
// value's Go type, sorted: two dumps are equal iff the rows are. The
// parameter forces the binary protocol (exact floats).
func dump(t *testing.T, db *sql.DB, table string, f *ShardFilter) []string {
	t.Helper()
	q, args := "SELECT * FROM "+table+" WHERE 1 = ?", []any{1}
	if f != nil {
		q, args = "SELECT * FROM "+table+" WHERE CRC32("+f.Column+") % 1024 = ?", []any{uint64(f.Shard)}
	}
	rs, err := db.Query(q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	cols, _ := rs.Columns()
	var out []string
	for rs.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, v := range vals {
			if s, ok := v.([]byte); ok {
				fmt.Fprintf(&b, "%q|", s)
			} else {
				fmt.Fprintf(&b, "%T:%v|", v, v)
			}
		}
		out = append(out, b.String())
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func sameDump(t *testing.T, what string, a, b []string) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d rows vs %d", what, len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("%s: first difference at sorted row %d:\n%s\n%s", what, i, a[i], b[i])
		}
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

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// copyAll copies with one snapshot to the end and returns the checkpoint.
func copyAll(t *testing.T, ctx context.Context, e *env, c *Copier) Checkpoint {
	t.Helper()
	snap, err := OpenSnapshot(ctx, e.sdb)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	ck, err := c.Run(ctx, snap, Checkpoint{}, nil)
	if err != nil || !ck.Done {
		t.Fatalf("Run = %+v, %v", ck, err)
	}
	return ck
}

// fast makes mismatch rechecks quick; the tests' targets are quiet.
var fast = WithRecheck(1, 20*time.Millisecond)

// checksum runs a whole checksum and returns the final state.
func checksum(t *testing.T, ctx context.Context, c *Checksummer) ChecksumState {
	t.Helper()
	st, err := c.Run(ctx, ChecksumState{}, nil)
	if err != nil || !st.Done {
		t.Fatalf("checksum Run = %+v, %v", st, err)
	}
	return st
}

// contains reports whether seg holds key k of a table whose key is all
// unsigned integers.
func contains(seg Segment, k ...uint64) bool {
	cmp := func(key Key) int {
		for i, p := range key {
			var v uint64
			fmt.Sscan(string(p), &v)
			if k[i] != v {
				if k[i] < v {
					return -1
				}
				return 1
			}
		}
		return 0
	}
	return (seg.After == nil || cmp(seg.After) > 0) && (seg.Upto == nil || cmp(seg.Upto) <= 0)
}
