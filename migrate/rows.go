package migrate

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/convoy-im/convoy/internal/sqlq"
)

// Rows travel as the driver scans them into `any` from the binary protocol
// (every query here has a parameter, so go-sql-driver prepares it): int64,
// []byte (text, binary, DECIMAL, temporal literals, and BIGINT UNSIGNED
// above 2^63-1 as its decimal text), float32 / float64 with their exact
// bits, nil for NULL. Bound back as parameters they store the same value:
// the text protocol would print a FLOAT with six digits and lose the rest.

// maxParams is the placeholder limit of one prepared statement (a 2-byte
// count in COM_STMT_PREPARE's answer).
const maxParams = 65535

// maxStatementBytes keeps one INSERT far below max_allowed_packet (16 MiB
// by default on MariaDB 10.11, 4 MiB on older servers); a chunk of large
// rows is written as several statements in one transaction.
const maxStatementBytes = 2 << 20

// readRows runs a SELECT of t's columns and returns the rows.
func readRows(ctx context.Context, q queryer, query string, args []any, ncols int) ([][]any, error) {
	rs, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out [][]any
	for rs.Next() {
		row := make([]any, ncols)
		ptrs := make([]any, ncols)
		for i := range row {
			ptrs[i] = &row[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			return nil, err
		}
		for _, v := range row {
			if _, ok := v.(time.Time); ok {
				return nil, fmt.Errorf("migrate: a DATETIME came back as time.Time: open the pool without parseTime, which loses zero dates and fractions")
			}
		}
		out = append(out, row)
	}
	return out, rs.Err()
}

// selectSQL is "SELECT <t's columns> FROM t WHERE ... ORDER BY pk" plus
// suffix (a LIMIT, a locking clause).
func selectSQL(t *table, cols string, w *where, suffix string) string {
	return "SELECT " + cols + " FROM " + t.qualified() + w.String() + " ORDER BY " + t.pkList() + suffix
}

// upsert writes rows (t's columns, in t's order) so that afterwards a row
// with exactly these values exists for each, whether it was missing,
// different or already equal: INSERT ... ON DUPLICATE KEY UPDATE of every
// column. Not REPLACE: REPLACE deletes and re-inserts, which fires DELETE
// triggers, cascades foreign keys and logs a delete plus an insert; ODKU
// changes the row in place. The key columns are in the UPDATE list too, so
// a row that blocks the insert through another unique key (conv_msg's
// uk_msg) becomes this row instead of failing.
func upsert(ctx context.Context, q queryer, t *table, rows [][]any) error {
	perStmt := maxParams / len(t.Columns)
	for len(rows) > 0 {
		n, size := 0, 0
		for n < len(rows) && n < perStmt && (n == 0 || size < maxStatementBytes) {
			size += rowBytes(rows[n])
			n++
		}
		args := make([]any, 0, n*len(t.Columns))
		for _, r := range rows[:n] {
			args = append(args, r...)
		}
		if _, err := q.ExecContext(ctx, upsertSQL(t, n), args...); err != nil {
			return fmt.Errorf("migrate: write %s: %w", t.qualified(), err)
		}
		rows = rows[n:]
	}
	return nil
}

func upsertSQL(t *table, n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + t.qualified() + " (" + t.columnList() + ") VALUES ")
	one := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(t.Columns)), ", ") + ")"
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(one)
	}
	b.WriteString(" ON DUPLICATE KEY UPDATE ")
	for i, c := range t.Columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(sqlq.Ident(c.Name) + " = VALUES(" + sqlq.Ident(c.Name) + ")")
	}
	return b.String()
}

func rowBytes(r []any) int {
	n := 0
	for _, v := range r {
		if b, ok := v.([]byte); ok {
			n += len(b)
		} else {
			n += 8
		}
	}
	return n
}

// keysPerStatement bounds the keys one statement names (deletes, locking
// reads, reads by key): its placeholders stay far below maxParams for any
// key width, and one statement's locks and rows stay a few milliseconds'
// work.
const keysPerStatement = 1024

// deleteKeys deletes the rows with these primary keys, a batch of
// equalities per statement.
func deleteKeys(ctx context.Context, q queryer, t *table, keys []Key) error {
	for len(keys) > 0 {
		n := min(keysPerStatement, len(keys))
		w := &where{}
		if err := w.anyKey(t, keys[:n]); err != nil {
			return err
		}
		if _, err := q.ExecContext(ctx, "DELETE FROM "+t.qualified()+w.String(), w.args...); err != nil {
			return fmt.Errorf("migrate: delete from %s: %w", t.qualified(), err)
		}
		keys = keys[n:]
	}
	return nil
}

// selectKeys reads cols (ncols of them) of t's rows with these primary keys
// (and of f's shard, if f is set), keysPerStatement keys a query; suffix is
// a locking clause or "".
func selectKeys(ctx context.Context, q queryer, t *table, cols string, ncols int, f *ShardFilter, keys []Key, suffix string) ([][]any, error) {
	var out [][]any
	for len(keys) > 0 {
		n := min(keysPerStatement, len(keys))
		w := &where{}
		if err := w.anyKey(t, keys[:n]); err != nil {
			return nil, err
		}
		w.shard(t, f)
		rows, err := readRows(ctx, q, selectSQL(t, cols, w, suffix), w.args, ncols)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
		keys = keys[n:]
	}
	return out, nil
}

// sameValue compares two scanned values exactly (floats by their bits, so
// -0 and 0 differ as they would in a checksum, and NaN equals itself).
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	case int64:
		y, ok := b.(int64)
		return ok && x == y
	case float32:
		y, ok := b.(float32)
		return ok && math.Float32bits(x) == math.Float32bits(y)
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	}
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// txn runs f in a transaction on conn, committing if f succeeds.
func txn(ctx context.Context, conn *sql.Conn, f func(tx *sql.Tx) error) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// lockKeys takes the row locks of the rows with these primary keys (of f's
// shard, if f is set), or their gaps where there is none, and returns the
// keys of the rows. With skipLocked it passes over rows another
// transaction holds instead of waiting for them, whatever plan the
// optimizer takes (it may scan the whole key: purge.go).
func lockKeys(ctx context.Context, q queryer, t *table, keys []Key, f *ShardFilter, skipLocked bool) ([]Key, error) {
	suffix := " FOR UPDATE"
	if skipLocked {
		suffix += " SKIP LOCKED"
	}
	rows, err := selectKeys(ctx, q, t, t.pkList(), len(t.PK), f, keys, suffix)
	if err != nil {
		return nil, fmt.Errorf("migrate: lock %s: %w", t.qualified(), err)
	}
	out := make([]Key, 0, len(rows))
	for _, r := range rows {
		k, err := pkKey(r)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}
