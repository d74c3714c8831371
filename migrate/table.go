package migrate

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/router"
)

// Errors a caller may want to tell apart; every returned error wraps at most
// one of them and names the table and column concerned.
var (
	// ErrNoTable: the table does not exist (or has no visible columns).
	ErrNoTable = errors.New("migrate: table not found")
	// ErrSchemaMismatch: source and target differ in a column, its type,
	// character set, nullability or the primary key.
	ErrSchemaMismatch = errors.New("migrate: source and target schemas differ")
	// ErrUnsupportedKey: no primary key, a prefix key, or a key column type
	// keyset pagination cannot compare exactly (FLOAT, ENUM, BLOB ...).
	ErrUnsupportedKey = errors.New("migrate: unsupported primary key")
)

// Side names one physical table on one server.
type Side struct {
	DB       *sql.DB
	Database string
	Table    string
}

func (s Side) String() string { return s.Database + "." + s.Table }

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

// column is one stored column as information_schema describes it.
type column struct {
	Name       string
	DataType   string // DATA_TYPE, lower case: bigint, varbinary, datetime
	ColumnType string // COLUMN_TYPE: bigint(20) unsigned
	Nullable   bool
	Charset    string // "" for non-text columns
	Collation  string
	Precision  int64 // NUMERIC_PRECISION / NUMERIC_SCALE, for DECIMAL keys
	Scale      int64
}

func (c column) unsigned() bool { return strings.Contains(c.ColumnType, "unsigned") }

func (c column) integer() bool {
	switch c.DataType {
	case "tinyint", "smallint", "mediumint", "int", "bigint":
		return true
	}
	return false
}

// table is what the copier and the checksummer know of one physical table.
// Generated columns are left out: they cannot be written and follow from the
// others.
type table struct {
	Database, Name string
	Columns        []column
	PK             []int // indexes into Columns, in key order
	filterCol      int   // index of the shard filter column, -1 without filter
	// generated names the generated columns left out of Columns: a binlog
	// row image carries them, and the applier must know to skip them.
	generated []string
}

// loadTable reads a table's stored columns and primary key.
func loadTable(ctx context.Context, q queryer, database, name string) (*table, error) {
	rows, err := q.QueryContext(ctx, `SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE,
		COALESCE(CHARACTER_SET_NAME, ''), COALESCE(COLLATION_NAME, ''),
		COALESCE(NUMERIC_PRECISION, 0), COALESCE(NUMERIC_SCALE, 0), IS_GENERATED
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?
		ORDER BY ORDINAL_POSITION`, database, name)
	if err != nil {
		return nil, fmt.Errorf("migrate: columns of %s.%s: %w", database, name, err)
	}
	defer rows.Close()
	t := &table{Database: database, Name: name, filterCol: -1}
	for rows.Next() {
		var c column
		var nullable, generated string
		if err := rows.Scan(&c.Name, &c.DataType, &c.ColumnType, &nullable, &c.Charset, &c.Collation,
			&c.Precision, &c.Scale, &generated); err != nil {
			return nil, fmt.Errorf("migrate: columns of %s.%s: %w", database, name, err)
		}
		if generated != "NEVER" {
			t.generated = append(t.generated, c.Name)
			continue
		}
		c.DataType, c.ColumnType = strings.ToLower(c.DataType), strings.ToLower(c.ColumnType)
		c.Nullable = nullable == "YES"
		t.Columns = append(t.Columns, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrate: columns of %s.%s: %w", database, name, err)
	}
	if len(t.Columns) == 0 {
		return nil, fmt.Errorf("%w: %s.%s", ErrNoTable, database, name)
	}

	krows, err := q.QueryContext(ctx, `SELECT COLUMN_NAME, SUB_PART IS NOT NULL FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX`, database, name)
	if err != nil {
		return nil, fmt.Errorf("migrate: primary key of %s.%s: %w", database, name, err)
	}
	defer krows.Close()
	for krows.Next() {
		var col string
		var prefix bool
		if err := krows.Scan(&col, &prefix); err != nil {
			return nil, fmt.Errorf("migrate: primary key of %s.%s: %w", database, name, err)
		}
		i := t.indexOf(col)
		if i < 0 || prefix {
			return nil, fmt.Errorf("%w: %s.%s: key column %s is generated or a prefix", ErrUnsupportedKey, database, name, col)
		}
		if !keyComparable(t.Columns[i]) {
			return nil, fmt.Errorf("%w: %s.%s: key column %s is %s, which keyset pagination cannot compare exactly",
				ErrUnsupportedKey, database, name, col, t.Columns[i].ColumnType)
		}
		t.PK = append(t.PK, i)
	}
	if err := krows.Err(); err != nil {
		return nil, fmt.Errorf("migrate: primary key of %s.%s: %w", database, name, err)
	}
	if len(t.PK) == 0 {
		return nil, fmt.Errorf("%w: %s.%s has no primary key", ErrUnsupportedKey, database, name)
	}
	return t, nil
}

// keyComparable reports whether a key column's values, carried as a Key and
// bound back as a parameter, compare in SQL exactly as the column orders
// them. Integers are bound as integers, DECIMAL through a CAST, text and
// temporal types as strings (the column's collation, or a temporal
// comparison, applies). FLOAT is inexact, ENUM orders by index, BLOB/TEXT
// keys are prefixes anyway.
func keyComparable(c column) bool {
	if c.integer() {
		return true
	}
	switch c.DataType {
	case "decimal", "char", "varchar", "binary", "varbinary", "date", "datetime", "timestamp", "time", "year":
		return true
	}
	return false
}

func (t *table) indexOf(name string) int {
	for i, c := range t.Columns {
		if strings.EqualFold(c.Name, name) {
			return i
		}
	}
	return -1
}

// withFilter checks the filter column and remembers it; the column must be
// an integer so that CRC32 hashes the decimal text router.ShardOf hashes.
func (t *table) withFilter(f *ShardFilter) error {
	if f == nil {
		return nil
	}
	i := t.indexOf(f.Column)
	if i < 0 {
		return fmt.Errorf("%w: %s.%s has no shard key column %s", ErrSchemaMismatch, t.Database, t.Name, f.Column)
	}
	if !t.Columns[i].integer() {
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
		j := dst.indexOf(sc.Name)
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
		if err := checkDriver(ctx, s.DB); err != nil {
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

// Key is a primary-key tuple, one part per key column: integers as decimal
// text, every other type as the bytes the server sent (text in utf8mb4,
// temporal values as their literal). It marshals to JSON as an array of
// strings, a part that is not valid UTF-8 as {"hex": "..."}, so a
// checkpoint stored in etcd stays readable and exact.
type Key [][]byte

type hexPart struct {
	Hex string `json:"hex"`
}

// MarshalJSON implements json.Marshaler.
func (k Key) MarshalJSON() ([]byte, error) {
	if k == nil {
		return []byte("null"), nil
	}
	parts := make([]any, len(k))
	for i, p := range k {
		if utf8.Valid(p) {
			parts[i] = string(p)
		} else {
			parts[i] = hexPart{Hex: hex.EncodeToString(p)}
		}
	}
	return json.Marshal(parts)
}

// UnmarshalJSON implements json.Unmarshaler.
func (k *Key) UnmarshalJSON(b []byte) error {
	var parts []json.RawMessage
	if err := json.Unmarshal(b, &parts); err != nil {
		return err
	}
	if parts == nil {
		*k = nil
		return nil
	}
	out := make(Key, len(parts))
	for i, raw := range parts {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			out[i] = []byte(s)
			continue
		}
		var h hexPart
		if err := json.Unmarshal(raw, &h); err != nil {
			return fmt.Errorf("migrate: key part %d: %s is neither a string nor {\"hex\": ...}", i, raw)
		}
		p, err := hex.DecodeString(h.Hex)
		if err != nil {
			return fmt.Errorf("migrate: key part %d: %w", i, err)
		}
		out[i] = p
	}
	*k = out
	return nil
}

// String renders the key for messages: (441,17), ("abc"), (0xff00).
func (k Key) String() string {
	if k == nil {
		return "(-)"
	}
	parts := make([]string, len(k))
	for i, p := range k {
		switch {
		case isDecimal(p):
			parts[i] = string(p)
		case utf8.Valid(p):
			parts[i] = strconv.Quote(string(p))
		default:
			parts[i] = "0x" + hex.EncodeToString(p)
		}
	}
	return "(" + strings.Join(parts, ",") + ")"
}

func isDecimal(p []byte) bool {
	if len(p) > 0 && p[0] == '-' {
		p = p[1:]
	}
	for _, c := range p {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(p) > 0
}

// valueBytes is a scanned value in Key form.
func valueBytes(v any) ([]byte, error) {
	switch x := v.(type) {
	case int64:
		return strconv.AppendInt(nil, x, 10), nil
	case uint64:
		return strconv.AppendUint(nil, x, 10), nil
	case []byte:
		return append([]byte{}, x...), nil
	case string:
		return []byte(x), nil
	case nil:
		return nil, errors.New("migrate: NULL in a primary key column")
	}
	return nil, fmt.Errorf("migrate: unexpected %T in a primary key column (is parseTime set on the DSN? it must not be)", v)
}

// keyOf extracts the primary key of a scanned row (columns in t's order).
func (t *table) keyOf(row []any) (Key, error) {
	k := make(Key, len(t.PK))
	for i, ci := range t.PK {
		b, err := valueBytes(row[ci])
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
	if c.integer() {
		if c.unsigned() {
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

// queryer is what *sql.DB, *sql.Conn and *sql.Tx have in common.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

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

// checkDriver makes sure a pool hands values over exactly (rows.go): a
// parameterised query must use the binary protocol (go-sql-driver's
// interpolateParams=false, its default) and DATETIME must stay text
// (parseTime=false), or FLOATs lose digits and zero dates their value.
func checkDriver(ctx context.Context, q queryer) error {
	var n, dt any
	if err := q.QueryRowContext(ctx, "SELECT CAST(? AS SIGNED), CAST(? AS DATETIME(3))", 1, "2001-02-03 04:05:06.789").Scan(&n, &dt); err != nil {
		return err
	}
	if _, ok := n.(int64); !ok {
		return errors.New("parameterised queries use the text protocol; open it with interpolateParams=false")
	}
	if _, ok := dt.([]byte); !ok {
		return fmt.Errorf("DATETIME scans as %T; open it with parseTime=false", dt)
	}
	return nil
}

// serverID identifies the server behind a connection, to catch a snapshot
// taken on another server than the copier's source.
func serverID(ctx context.Context, q queryer) (uint64, error) {
	var id uint64
	err := q.QueryRowContext(ctx, "SELECT @@server_id").Scan(&id)
	return id, err
}
