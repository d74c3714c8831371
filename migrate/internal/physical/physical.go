// Package physical is what a shard migration's runner (package migrate)
// and every proxy's part in it (package migrate/inproxy) both need of the
// MariaDB servers on its two sides: a pool per datasource (binlog.Connector,
// Pools), a physical table on one server (Side), its stored columns and
// primary key (Table, LoadTable), a primary-key tuple (Key), the check
// that a pool hands values over exactly (CheckDriver), and the name of the
// binlog apply's checkpoint table (CheckpointTable).
//
// The runner's SQL built from a table (package migrate's table.go) stays
// with the runner; this package only describes.
package physical

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/router"
)

// Errors LoadTable's callers may want to tell apart (package migrate
// exports them too); every returned error wraps at most one of them and
// names the table and column concerned.
var (
	// ErrNoTable: the table does not exist (or has no visible columns).
	ErrNoTable = errors.New("migrate: table not found")
	// ErrUnsupportedKey: no primary key, a prefix key, or a key column type
	// keyset pagination cannot compare exactly (FLOAT, ENUM, BLOB ...).
	ErrUnsupportedKey = errors.New("migrate: unsupported primary key")
)

// CheckpointTable is the table, in a target database, where an Applier
// keeps its position: one row per (job, shard), written in the same target
// transaction as the rows of each source transaction it applies.
const CheckpointTable = "_convoy_migration_checkpoint"

// Side names one physical table on one server.
type Side struct {
	DB       *sql.DB
	Database string
	Table    string
}

func (s Side) String() string { return s.Database + "." + s.Table }

// Column is one stored column as information_schema describes it.
type Column struct {
	Name       string
	DataType   string // DATA_TYPE, lower case: bigint, varbinary, datetime
	ColumnType string // COLUMN_TYPE: bigint(20) unsigned
	Nullable   bool
	Charset    string // "" for non-text columns
	Collation  string
	Precision  int64 // NUMERIC_PRECISION / NUMERIC_SCALE, for DECIMAL keys
	Scale      int64
}

// Unsigned reports whether the column type is unsigned.
func (c Column) Unsigned() bool { return strings.Contains(c.ColumnType, "unsigned") }

// Integer reports an integer column.
func (c Column) Integer() bool {
	switch c.DataType {
	case "tinyint", "smallint", "mediumint", "int", "bigint":
		return true
	}
	return false
}

// Table is what the copier and the checksummer know of one physical table.
// Generated columns are left out: they cannot be written and follow from the
// others.
type Table struct {
	Database, Name string
	Columns        []Column
	PK             []int // indexes into Columns, in key order
	// Generated names the generated columns left out of Columns: a binlog
	// row image carries them, and the applier must know to skip them.
	Generated []string
}

// LoadTable reads a table's stored columns and primary key.
func LoadTable(ctx context.Context, q Queryer, database, name string) (*Table, error) {
	rows, err := q.QueryContext(ctx, `SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE,
		COALESCE(CHARACTER_SET_NAME, ''), COALESCE(COLLATION_NAME, ''),
		COALESCE(NUMERIC_PRECISION, 0), COALESCE(NUMERIC_SCALE, 0), IS_GENERATED
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?
		ORDER BY ORDINAL_POSITION`, database, name)
	if err != nil {
		return nil, fmt.Errorf("migrate: columns of %s.%s: %w", database, name, err)
	}
	defer rows.Close()
	t := &Table{Database: database, Name: name}
	for rows.Next() {
		var c Column
		var nullable, generated string
		if err := rows.Scan(&c.Name, &c.DataType, &c.ColumnType, &nullable, &c.Charset, &c.Collation,
			&c.Precision, &c.Scale, &generated); err != nil {
			return nil, fmt.Errorf("migrate: columns of %s.%s: %w", database, name, err)
		}
		if generated != "NEVER" {
			t.Generated = append(t.Generated, c.Name)
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
		i := t.IndexOf(col)
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
func keyComparable(c Column) bool {
	if c.Integer() {
		return true
	}
	switch c.DataType {
	case "decimal", "char", "varchar", "binary", "varbinary", "date", "datetime", "timestamp", "time", "year":
		return true
	}
	return false
}

// IndexOf is the index in Columns of the column name (any case), -1
// when there is none.
func (t *Table) IndexOf(name string) int {
	for i, c := range t.Columns {
		if strings.EqualFold(c.Name, name) {
			return i
		}
	}
	return -1
}

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

// ValueBytes is a scanned value in Key form.
func ValueBytes(v any) ([]byte, error) {
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

// KeyOf builds a primary key from values as the engine holds them
// (uint64, int64, string, []byte, ...).
func KeyOf(values ...any) (Key, error) {
	k := make(Key, len(values))
	for i, v := range values {
		switch x := v.(type) {
		case uint64:
			k[i] = fmt.Appendf(nil, "%d", x)
		case int:
			k[i] = fmt.Appendf(nil, "%d", x)
		case string:
			k[i] = []byte(x)
		default:
			b, err := ValueBytes(v)
			if err != nil {
				return nil, err
			}
			k[i] = b
		}
	}
	return k, nil
}

// Queryer is what *sql.DB, *sql.Conn and *sql.Tx have in common.
type Queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// CheckDriver makes sure a pool hands values over exactly (migrate's
// rows.go): a parameterised query must use the binary protocol
// (go-sql-driver's interpolateParams=false, its default) and DATETIME must
// stay text (parseTime=false), or FLOATs lose digits and zero dates their
// value.
func CheckDriver(ctx context.Context, q Queryer) error {
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

// Pools opens each datasource once (per name, address and account: a
// datasource redefined in the routes gets a new pool).
type Pools struct {
	connect binlog.Connector
	mu      sync.Mutex
	m       map[string]poolEntry
}

type poolEntry struct {
	db *sql.DB
	bl binlog.Config
}

// NewPools returns no pools yet; Get opens them with c.
func NewPools(c binlog.Connector) *Pools { return &Pools{connect: c, m: map[string]poolEntry{}} }

// Get returns the pool of ds and its binlog connection, opened at the
// first call.
func (p *Pools) Get(ctx context.Context, ds router.Datasource) (*sql.DB, binlog.Config, error) {
	key := ds.Name + "\x00" + ds.Addr + "\x00" + ds.User
	p.mu.Lock()
	e, ok := p.m[key]
	p.mu.Unlock()
	if ok {
		return e.db, e.bl, nil
	}
	db, bl, err := p.connect(ctx, ds)
	if err != nil {
		return nil, binlog.Config{}, fmt.Errorf("migrate: connect to datasource %s: %w", ds.Name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.m[key]; ok { // opened concurrently
		db.Close()
		return e.db, e.bl, nil
	}
	p.m[key] = poolEntry{db: db, bl: bl}
	return db, bl, nil
}

// Close closes every pool. Idempotent.
func (p *Pools) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, e := range p.m {
		e.db.Close()
		delete(p.m, k)
	}
}
