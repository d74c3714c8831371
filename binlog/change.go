package binlog

import (
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// Kind is what a Change did to its row.
type Kind uint8

// The row operations of a ROW-format binlog.
const (
	Insert Kind = iota + 1
	Update
	Delete
)

func (k Kind) String() string {
	switch k {
	case Insert:
		return "insert"
	case Update:
		return "update"
	case Delete:
		return "delete"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Change is one row changed by a committed transaction, with whole rows
// (binlog_row_image=FULL) so a consumer can apply it idempotently by key
// (REPLACE the After image, DELETE by the Before image's key) without
// reading the source again.
//
// Values are Go values chosen so that passing them back as query arguments
// stores the same bytes, and so that equal rows compare equal with
// reflect.DeepEqual:
//   - NULL: nil
//   - integer columns (TINYINT .. BIGINT, YEAR): int64, or uint64 for
//     UNSIGNED ones (BIGINT UNSIGNED 2^64-1 is uint64 max, never -1); BIT: uint64
//   - FLOAT: float32, DOUBLE: float64 (exact; a float64 would print 0.1f as
//     0.10000000149011612); DECIMAL: string ("12.50"), exact
//   - DATE, TIME, DATETIME(n), TIMESTAMP(n): string in MariaDB's text form
//     with the column's fractional digits ("2024-05-01 12:00:00.125"), as
//     go-sql-driver returns them without parseTime. Text, not time.Time:
//     DATETIME has no time zone, zero dates ("0000-00-00") have no
//     time.Time, and the fraction's width survives. TIMESTAMP is printed in
//     UTC (the binlog stores it as UTC seconds); apply it with time_zone
//     '+00:00'.
//   - CHAR, VARCHAR, TEXT, JSON (MariaDB's LONGTEXT alias): string; BINARY,
//     VARBINARY, BLOB, GEOMETRY: []byte (binary collation decides)
//   - ENUM: string (the member name; "" for the invalid-value index 0);
//     SET: string, member names joined by "," as MariaDB prints them
type Change struct {
	Schema, Table string
	Kind          Kind
	// Columns are the table's column names in table order, as of this
	// change (a later ALTER TABLE shows up as different Columns on later
	// changes). Shared by the changes of one table within a Txn: read only.
	Columns []string
	// Key holds the indexes into Columns of the table's primary key, in key
	// order; nil if the table has none. Shared like Columns.
	Key []int
	// Before is the row before the change (nil for Insert); After the row
	// after it (nil for Delete). Both are full rows, len(Columns) long.
	Before, After []any
}

// Txn is one committed transaction's changes that passed Config.Filter, in
// the order the server applied them.
type Txn struct {
	// GTID identifies the transaction ("0-1-42").
	GTID string
	// Changes are the filtered row changes, at least one.
	Changes []Change
	// Next is the position to resume from once this transaction is applied:
	// Stream(ctx, cfg, txn.Next, fn) delivers exactly the transactions after
	// this one. It also covers filtered-out transactions before this one.
	Next Position
	// Time is when the server wrote the transaction's commit event, in whole
	// seconds (the binlog's resolution): time.Since(Time) is the stream's
	// lag behind the server at this transaction.
	Time time.Time
	// End is where the transaction ends in the binary log of the server
	// streamed from: a snapshot there that is at or after End sees it
	// (SnapshotCovering).
	End FileOffset
}

// binaryCollation is the "binary" collation id that distinguishes BINARY,
// VARBINARY and BLOB from CHAR, VARCHAR and TEXT in the row metadata.
const binaryCollation = 63

// colShape says how to convert one column's decoded value.
type colShape struct {
	binary  bool     // []byte rather than string
	padTo   int      // BINARY(n): the binlog drops trailing zero bytes; n puts them back
	bit     bool     // BIT: go-mysql gives int64; uint64 holds BIT(64) as written
	enum    []string // ENUM member names (1-based index in the binlog)
	set     []string // SET member names (bit i = member i)
	numeric bool     // an integer column: needs signedness
}

// tableShape is what a TABLE_MAP event says about a table, checked and
// prepared once per event rather than once per row.
type tableShape struct {
	schema, table string
	columns       []string
	key           []int
	cols          []colShape
	unsigned      map[int]bool
}

// newTableShape checks that the TABLE_MAP event carries FULL row metadata
// (column names, signedness, collations) and prepares the conversion. A
// missing piece is a server setting problem, refused with what to fix: a
// reader that guessed names from information_schema could map a row that
// was logged before an ALTER TABLE onto the columns after it.
func newTableShape(tm *replication.TableMapEvent) (*tableShape, error) {
	s := &tableShape{schema: string(tm.Schema), table: string(tm.Table)}
	n := int(tm.ColumnCount)
	s.columns = tm.ColumnNameString()
	if len(s.columns) != n {
		return nil, fmt.Errorf("%w: the TABLE_MAP event of %s.%s has %d column names for %d columns: "+
			"the server does not log column names; SET GLOBAL binlog_row_metadata=FULL "+
			"(and binlog_row_metadata=FULL in its configuration, so a restart keeps it)",
			ErrServerConfig, s.schema, s.table, len(s.columns), n)
	}
	if len(tm.PrimaryKey) > 0 {
		s.key = make([]int, len(tm.PrimaryKey))
		for i, k := range tm.PrimaryKey {
			if k >= uint64(n) {
				return nil, fmt.Errorf("binlog: TABLE_MAP of %s.%s: primary key column %d of %d", s.schema, s.table, k, n)
			}
			s.key[i] = int(k)
		}
	}
	s.unsigned = tm.UnsignedMap()
	collations := tm.CollationMap()
	enums := tm.EnumStrValueMap()
	sets := tm.SetStrValueMap()
	s.cols = make([]colShape, n)
	for i := range s.cols {
		c := &s.cols[i]
		c.numeric = tm.IsNumericColumn(i)
		switch {
		case tm.IsEnumColumn(i):
			c.enum = enums[i]
		case tm.IsSetColumn(i):
			c.set = sets[i]
		case tm.ColumnType[i] == mysql.MYSQL_TYPE_BIT:
			c.bit = true
		case tm.ColumnType[i] == mysql.MYSQL_TYPE_GEOMETRY:
			c.binary = true
		case tm.IsCharacterColumn(i):
			coll, ok := collations[i]
			if !ok {
				return nil, fmt.Errorf("%w: the TABLE_MAP event of %s.%s has no character set for column %s: "+
					"SET GLOBAL binlog_row_metadata=FULL", ErrServerConfig, s.schema, s.table, s.columns[i])
			}
			c.binary = coll == binaryCollation
			if c.binary && tm.ColumnType[i] == mysql.MYSQL_TYPE_STRING {
				c.padTo = fixedLength(tm.ColumnMeta[i])
			}
		}
		if c.numeric && s.unsigned == nil {
			return nil, fmt.Errorf("%w: the TABLE_MAP event of %s.%s has no signedness: "+
				"SET GLOBAL binlog_row_metadata=FULL", ErrServerConfig, s.schema, s.table)
		}
	}
	return s, nil
}

// changes converts one rows event into Changes appended to dst.
func (s *tableShape) changes(dst []Change, ev *replication.RowsEvent) ([]Change, error) {
	var kind Kind
	switch ev.Type() {
	case replication.EnumRowsEventTypeInsert:
		kind = Insert
	case replication.EnumRowsEventTypeUpdate:
		kind = Update
	case replication.EnumRowsEventTypeDelete:
		kind = Delete
	default:
		return dst, fmt.Errorf("%w: rows event %s on %s.%s", ErrUnsupported, ev.Type(), s.schema, s.table)
	}
	for _, skipped := range ev.SkippedColumns {
		if len(skipped) > 0 {
			// A partial image cannot be applied as a whole row and must
			// not be mistaken for one. binlog_row_image is also a session
			// variable, so a client can do this on a server that is FULL.
			return dst, fmt.Errorf("%w: a row %s on %s.%s was logged without %d of its columns: "+
				"binlog_row_image is not FULL for the session that wrote it; "+
				"SET GLOBAL binlog_row_image=FULL and keep clients from changing it",
				ErrServerConfig, kind, s.schema, s.table, len(skipped))
		}
	}
	step := 1
	if kind == Update {
		step = 2 // before image, after image
	}
	if len(ev.Rows)%step != 0 {
		return dst, fmt.Errorf("binlog: update on %s.%s with %d images (odd)", s.schema, s.table, len(ev.Rows))
	}
	for i := 0; i < len(ev.Rows); i += step {
		c := Change{Schema: s.schema, Table: s.table, Kind: kind, Columns: s.columns, Key: s.key}
		first, err := s.row(ev.Rows[i])
		if err != nil {
			return dst, err
		}
		switch kind {
		case Insert:
			c.After = first
		case Delete:
			c.Before = first
		case Update:
			c.Before = first
			if c.After, err = s.row(ev.Rows[i+1]); err != nil {
				return dst, err
			}
		}
		dst = append(dst, c)
	}
	return dst, nil
}

func (s *tableShape) row(in []any) ([]any, error) {
	if len(in) != len(s.cols) {
		return nil, fmt.Errorf("binlog: row of %s.%s has %d values for %d columns", s.schema, s.table, len(in), len(s.cols))
	}
	out := make([]any, len(in))
	for i, v := range in {
		x, err := s.value(i, v)
		if err != nil {
			return nil, fmt.Errorf("binlog: %s.%s.%s: %w", s.schema, s.table, s.columns[i], err)
		}
		out[i] = x
	}
	return out, nil
}

// value maps go-mysql's decoded value to the types documented on Change.
func (s *tableShape) value(i int, v any) (any, error) {
	c := &s.cols[i]
	switch x := v.(type) {
	case nil:
		return nil, nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int:
		return int64(x), nil
	case int64:
		switch {
		case c.bit:
			return uint64(x), nil
		case c.enum != nil:
			if x == 0 {
				return "", nil
			}
			if x < 0 || int(x) > len(c.enum) {
				return nil, fmt.Errorf("ENUM index %d of %d members", x, len(c.enum))
			}
			return c.enum[x-1], nil
		case c.set != nil:
			return setString(uint64(x), c.set)
		}
		return x, nil
	case uint8:
		return uint64(x), nil
	case uint16:
		return uint64(x), nil
	case uint32:
		return uint64(x), nil
	case uint64:
		return x, nil
	case float32, float64:
		return x, nil
	case string:
		// go-mysql's strings and blobs alias the event's packet, which it
		// allocates for that event alone and never reuses: no copy needed
		// beyond the type change.
		if c.binary {
			b := make([]byte, max(len(x), c.padTo))
			copy(b, x)
			return b, nil
		}
		return x, nil
	case []byte:
		if c.binary {
			return x, nil
		}
		return string(x), nil
	}
	return nil, fmt.Errorf("unexpected decoded value %T", v)
}

func setString(mask uint64, members []string) (string, error) {
	if mask>>len(members) != 0 && len(members) < 64 {
		return "", fmt.Errorf("SET bits %#x beyond its %d members", mask, len(members))
	}
	var b strings.Builder
	for mask != 0 {
		i := bits.TrailingZeros64(mask)
		mask &^= 1 << i
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(members[i])
	}
	return b.String(), nil
}

// fixedLength is the byte length of a CHAR / BINARY column from its
// TABLE_MAP metadata: the low byte, with two more bits hidden in the type
// byte for lengths over 255 (MySQL's Field_string::save_field_metadata).
func fixedLength(meta uint16) int {
	if meta < 256 {
		return int(meta)
	}
	b0, b1 := meta>>8, meta&0xff
	if b0&0x30 != 0x30 {
		return int(b1 | ((b0&0x30)^0x30)<<4)
	}
	return int(b1)
}
