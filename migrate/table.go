package migrate

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/migrate/internal/physical"
	"github.com/convoy-im/convoy/router"
)

// Errors a caller may want to tell apart; every returned error wraps at most
// one of them and names the table and column concerned.
var (
	// ErrNoTable: the table does not exist (or has no visible columns).
	ErrNoTable = physical.ErrNoTable
	// ErrSchemaMismatch: source and target differ in a column, its type,
	// character set, nullability or the primary key.
	ErrSchemaMismatch = errors.New("migrate: source and target schemas differ")
	// ErrUnsupportedKey: no primary key, a prefix key, or a key column type
	// keyset pagination cannot compare exactly (FLOAT, ENUM, BLOB ...).
	ErrUnsupportedKey = physical.ErrUnsupportedKey
)

// A physical table and a primary-key tuple are described in package
// physical, which the proxies' part of a migration (migrate/inproxy)
// shares; Side and Key keep their names here.
type (
	// Side names one physical table on one server.
	Side = physical.Side
	// Key is a primary-key tuple, one part per key column (physical.Key).
	Key = physical.Key

	column  = physical.Column
	queryer = physical.Queryer
)

// ShardFilter restricts a copy or a checksum to one logical shard's rows of
// a physical table several shards share (small layouts put up to 128 in one
// table): CRC32(Column) % 1024 = Shard, which is router.ShardOf spelled in
// SQL (MariaDB hashes an integer column's decimal text, as ShardOf does).
// Passing it for a table that holds one shard only costs one CRC32 per row
// and leaves behind any row that does not belong there, so the job may pass
// it always.
type ShardFilter struct {
	Column string
	Shard  router.Shard
}

// FilterFor is the filter for a logical table's shard key column.
func FilterFor(logical string, shard router.Shard) (*ShardFilter, error) {
	col, ok := router.ShardKeyColumn(logical)
	if !ok {
		return nil, fmt.Errorf("migrate: %q is not a sharded table", logical)
	}
	if int(shard) >= router.NumShards {
		return nil, fmt.Errorf("migrate: shard %d out of range", shard)
	}
	return &ShardFilter{Column: col, Shard: shard}, nil
}

// table is what the copier and the checksummer know of one physical table
// (physical.Table), and the shard filter set on it.
type table struct {
	physical.Table
	filterCol int // index of the shard filter column, -1 without filter
}

// loadTable reads a table's stored columns and primary key.
func loadTable(ctx context.Context, q queryer, database, name string) (*table, error) {
	t, err := physical.LoadTable(ctx, q, database, name)
	if err != nil {
		return nil, err
	}
	return &table{Table: *t, filterCol: -1}, nil
}

// withFilter checks the filter column and remembers it; the column must be
// an integer so that CRC32 hashes the decimal text router.ShardOf hashes.
func (t *table) withFilter(f *ShardFilter) error {
	if f == nil {
		return nil
	}
	i := t.IndexOf(f.Column)
	if i < 0 {
		return fmt.Errorf("%w: %s.%s has no shard key column %s", ErrSchemaMismatch, t.Database, t.Name, f.Column)
	}
	if !t.Columns[i].Integer() {
		return fmt.Errorf("migrate: %s.%s: shard key column %s is %s; CRC32 matches router.ShardOf only for integers",
			t.Database, t.Name, f.Column, t.Columns[i].ColumnType)
	}
	t.filterCol = i
	return nil
}

// sameShape checks that dst can hold src's rows value for value: the same
// stored columns (by name, in any order) with the same types, character
// sets and nullability, and the same primary key.
func sameShape(src, dst *table) error {
	if len(src.Columns) != len(dst.Columns) {
		return fmt.Errorf("%w: %s.%s has %d stored columns, %s.%s has %d", ErrSchemaMismatch,
			src.Database, src.Name, len(src.Columns), dst.Database, dst.Name, len(dst.Columns))
	}
	for _, sc := range src.Columns {
		j := dst.IndexOf(sc.Name)
		if j < 0 {
			return fmt.Errorf("%w: column %s missing on %s.%s", ErrSchemaMismatch, sc.Name, dst.Database, dst.Name)
		}
		dc := dst.Columns[j]
		if sc.ColumnType != dc.ColumnType || sc.Nullable != dc.Nullable || sc.Charset != dc.Charset || sc.Collation != dc.Collation {
			return fmt.Errorf("%w: column %s is %s on %s.%s and %s on %s.%s", ErrSchemaMismatch, sc.Name,
				describe(sc), src.Database, src.Name, describe(dc), dst.Database, dst.Name)
		}
	}
	if len(src.PK) != len(dst.PK) {
		return fmt.Errorf("%w: primary keys of %s.%s and %s.%s differ", ErrSchemaMismatch, src.Database, src.Name, dst.Database, dst.Name)
	}
	for i := range src.PK {
		if !strings.EqualFold(src.Columns[src.PK[i]].Name, dst.Columns[dst.PK[i]].Name) {
			return fmt.Errorf("%w: primary keys of %s.%s and %s.%s differ", ErrSchemaMismatch, src.Database, src.Name, dst.Database, dst.Name)
		}
	}
	return nil
}

// as is src's description applied to another table of the same shape
// (sameShape checked): SQL for both sides then lists the columns in one
// order, so rows and checksums line up.
func (t *table) as(database, name string) *table {
	c := *t
	c.Database, c.Name = database, name
	return &c
}

// loadPair loads both sides, checks that they have the same shape and the
// filter column, and returns source's description for each side.
func loadPair(ctx context.Context, src, dst Side, f *ShardFilter) (*table, *table, error) {
	st, err := loadTable(ctx, src.DB, src.Database, src.Table)
	if err != nil {
		return nil, nil, err
	}
	dt, err := loadTable(ctx, dst.DB, dst.Database, dst.Table)
	if err != nil {
		return nil, nil, err
	}
	for _, s := range []Side{src, dst} {
		if err := physical.CheckDriver(ctx, s.DB); err != nil {
			return nil, nil, fmt.Errorf("migrate: pool of %s: %w", s, err)
		}
	}
	if err := sameShape(st, dt); err != nil {
		return nil, nil, err
	}
	if err := st.withFilter(f); err != nil {
		return nil, nil, err
	}
	return st, st.as(dst.Database, dst.Table), nil
}

func describe(c column) string {
	s := c.ColumnType
	if c.Collation != "" {
		s += " " + c.Collation
	}
	if c.Nullable {
		return s + " NULL"
	}
	return s + " NOT NULL"
}

// ---- keys ---------------------------------------------------------------

// keyOf extracts the primary key of a scanned row (columns in t's order).
func (t *table) keyOf(row []any) (Key, error) {
	k := make(Key, len(t.PK))
	for i, ci := range t.PK {
		b, err := physical.ValueBytes(row[ci])
		if err != nil {
			return nil, fmt.Errorf("%s.%s.%s: %w", t.Database, t.Name, t.Columns[ci].Name, err)
		}
		k[i] = b
	}
	return k, nil
}

// keyArg is one key part bound as a parameter of the column's own kind, so
// the comparison is exact: an integer against a string would be compared
// as a double and a BIGINT above 2^53 would lose its place.
func keyArg(c column, part []byte) (any, error) {
	if c.Integer() {
		if c.Unsigned() {
			v, err := strconv.ParseUint(string(part), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("migrate: key column %s: %q is not an unsigned integer", c.Name, part)
			}
			return v, nil
		}
		v, err := strconv.ParseInt(string(part), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("migrate: key column %s: %q is not an integer", c.Name, part)
		}
		return v, nil
	}
	return part, nil
}

// placeholder is the parameter marker for a key column: DECIMAL goes
// through a CAST so it is compared as a decimal, not as a double.
func placeholder(c column) string {
	if c.DataType == "decimal" {
		return fmt.Sprintf("CAST(? AS DECIMAL(%d,%d))", c.Precision, c.Scale)
	}
	return "?"
}

// ---- SQL fragments -------------------------------------------------------

// quoteIdent quotes an identifier with backticks.

func (t *table) qualified() string { return sqlq.Ident(t.Database) + "." + sqlq.Ident(t.Name) }

// columnList is the stored columns in t's order, quoted: `a`, `b`.
func (t *table) columnList() string {
	names := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = sqlq.Ident(c.Name)
	}
	return strings.Join(names, ", ")
}

func (t *table) pkList() string {
	names := make([]string, len(t.PK))
	for i, ci := range t.PK {
		names[i] = sqlq.Ident(t.Columns[ci].Name)
	}
	return strings.Join(names, ", ")
}

// where accumulates AND-ed conditions and their arguments.
type where struct {
	conds []string
	args  []any
}

func (w *where) String() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}

// keyCompare adds "key > k" (after) or "key <= k" (!after). A nil key adds
// nothing: the range is open on that side. The row-constructor spelling
// (a, b) > (?, ?) would be shorter, but MariaDB 10.11 does not turn it into
// an index range (EXPLAIN shows a full index scan), so every chunk would
// start from the table's first row; the expanded OR form is a range.
func (w *where) keyCompare(t *table, k Key, after bool) error {
	if k == nil {
		return nil
	}
	args, err := t.keyArgs(k)
	if err != nil {
		return err
	}
	var ors []string
	for i := range t.PK {
		op := ">"
		if !after {
			op = "<"
		}
		ors = append(ors, w.prefixEq(t, args, i, op))
	}
	if !after {
		ors = append(ors, w.prefixEq(t, args, len(t.PK), ""))
	}
	w.conds = append(w.conds, "("+strings.Join(ors, " OR ")+")")
	return nil
}

// keyEquals adds "key = k".
func (w *where) keyEquals(t *table, k Key) error {
	args, err := t.keyArgs(k)
	if err != nil {
		return err
	}
	w.conds = append(w.conds, w.prefixEq(t, args, len(t.PK), ""))
	return nil
}

// anyKey adds "(key columns) IN ((k1), (k2), ...)". MariaDB reads it as
// one index range per key, in time linear in the keys (about 3.5 µs a key
// here, up to 4096); the equivalent OR of key equalities costs 40 µs a key
// at 4096, its range analysis growing faster than the keys.
func (w *where) anyKey(t *table, keys []Key) error {
	marks := make([]string, len(t.PK))
	for i, ci := range t.PK {
		marks[i] = placeholder(t.Columns[ci])
	}
	tuple := "(" + strings.Join(marks, ", ") + ")"
	for _, k := range keys {
		args, err := t.keyArgs(k)
		if err != nil {
			return err
		}
		w.args = append(w.args, args...)
	}
	w.conds = append(w.conds, "("+t.pkList()+") IN ("+strings.TrimSuffix(strings.Repeat(tuple+", ", len(keys)), ", ")+")")
	return nil
}

// keyArgs binds each part of k as its column's kind (keyArg).
func (t *table) keyArgs(k Key) ([]any, error) {
	if len(k) != len(t.PK) {
		return nil, fmt.Errorf("migrate: key %s has %d parts, %s.%s's primary key has %d", k, len(k), t.Database, t.Name, len(t.PK))
	}
	args := make([]any, len(k))
	for i, ci := range t.PK {
		a, err := keyArg(t.Columns[ci], k[i])
		if err != nil {
			return nil, err
		}
		args[i] = a
	}
	return args, nil
}

// prefixEq renders key columns 0..n-1 equal to args and column n compared
// with op (none when n is the key's length), appending the arguments.
func (w *where) prefixEq(t *table, args []any, n int, op string) string {
	var ands []string
	for j := 0; j < n; j++ {
		c := t.Columns[t.PK[j]]
		ands = append(ands, sqlq.Ident(c.Name)+" = "+placeholder(c))
		w.args = append(w.args, args[j])
	}
	if n < len(t.PK) {
		c := t.Columns[t.PK[n]]
		ands = append(ands, sqlq.Ident(c.Name)+" "+op+" "+placeholder(c))
		w.args = append(w.args, args[n])
	}
	return "(" + strings.Join(ands, " AND ") + ")"
}

// shard adds the shard filter, if the table has one.
func (w *where) shard(t *table, f *ShardFilter) {
	if t.filterCol < 0 || f == nil {
		return
	}
	w.conds = append(w.conds, fmt.Sprintf("CRC32(%s) %% %d = ?", sqlq.Ident(t.Columns[t.filterCol].Name), router.NumShards))
	w.args = append(w.args, uint64(f.Shard))
}

// segmentWhere is the condition for rows of seg (after < key <= upto) of
// the filter's shard.
func segmentWhere(t *table, f *ShardFilter, after, upto Key) (*where, error) {
	w := &where{}
	if err := w.keyCompare(t, after, true); err != nil {
		return nil, err
	}
	if err := w.keyCompare(t, upto, false); err != nil {
		return nil, err
	}
	w.shard(t, f)
	return w, nil
}

// ---- connections -----------------------------------------------------------

// sessionSetup makes values travel exactly between two servers whatever
// the pool's DSN says: utf8mb4 carries every character set's text; UTC
// makes TIMESTAMP values unambiguous (a local zone repeats an hour each
// autumn); the sql_mode is strict, so a value the target cannot hold is an
// error and not a silent truncation, accepts zero dates as the source
// stored them, and keeps an explicit 0 in an AUTO_INCREMENT column. The
// migration's writes pass the storage fence (migrationVar, fence.go).
const sessionSetup = "SET NAMES utf8mb4, SESSION time_zone = '+00:00', " +
	"SESSION sql_mode = 'STRICT_ALL_TABLES,NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION', " + migrationVar + " = 1"

// sessionConn takes one connection out of db's pool for a whole run and
// sets its session up. Give it back with discard.
func sessionConn(ctx context.Context, db *sql.DB) (*sql.Conn, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, sessionSetup); err != nil {
		discard(conn)
		return nil, err
	}
	return conn, nil
}

// discard closes a session connection instead of returning it to the
// pool: its time zone and sql_mode would surprise the pool's next user.
// database/sql closes a connection whose Raw callback reports ErrBadConn.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// serverID identifies the server behind a connection, to catch a snapshot
// taken on another server than the copier's source.
func serverID(ctx context.Context, q queryer) (uint64, error) {
	var id uint64
	err := q.QueryRowContext(ctx, "SELECT @@server_id").Scan(&id)
	return id, err
}
