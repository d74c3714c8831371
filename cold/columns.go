package cold

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Column is one column definition as MySQL sent it in the result set that
// was archived: enough to produce the same column definition packet again
// and to encode a text value in the binary protocol (the type decides the
// binary encoding, flags carry UNSIGNED, decimals the fractional digits).
type Column struct {
	Name     string `json:"name"`
	OrgName  string `json:"org_name,omitempty"`
	Type     uint8  `json:"type"` // mysql.MYSQL_TYPE_*
	Flags    uint16 `json:"flags"`
	Charset  uint16 `json:"charset"`
	Decimals uint8  `json:"decimals"`
	Length   uint32 `json:"length"`
}

// ColumnFromField copies a wire column definition.
func ColumnFromField(f *mysql.Field) Column {
	return Column{Name: string(f.Name), OrgName: string(f.OrgName), Type: f.Type, Flags: f.Flag,
		Charset: f.Charset, Decimals: f.Decimal, Length: f.ColumnLength}
}

// Field is the inverse of ColumnFromField; schema and table names are the
// caller's (the physical table a row came from is not the one a client
// asked for).
func (c Column) Field() *mysql.Field {
	return &mysql.Field{Name: []byte(c.Name), OrgName: []byte(c.OrgName), Type: c.Type, Flag: c.Flags,
		Charset: c.Charset, Decimal: c.Decimals, ColumnLength: c.Length}
}

// Tables are the column definitions of the archived tables, stored as JSON
// in every file's key-value metadata (metaColumns): conv_msg and
// msg_content in a history file, im_inbox alone in an inbox file.
type Tables struct {
	Msg     []Column `json:"conv_msg,omitempty"`
	Content []Column `json:"msg_content,omitempty"`
	Inbox   []Column `json:"im_inbox,omitempty"`
}

// keyColumns are the conv_msg columns also stored typed, for pruning; a
// file's conv_msg definitions must contain them as BIGINT UNSIGNED.
var keyColumns = [...]string{"conv_id", "seq", "msg_id"}

// inboxKeyColumns are im_inbox's primary key, stored typed too (the order
// of the rows); nothing reads inbox files by them yet, but a file's rows
// stay identifiable without decoding the text columns.
var inboxKeyColumns = [...]string{"uid", "conv_id", "seq"}

func (t Tables) inbox() bool { return len(t.Inbox) > 0 }

func (t Tables) validate() error {
	if t.inbox() {
		if len(t.Msg) != 0 || len(t.Content) != 0 {
			return fmt.Errorf("cold: a file holds history or inbox rows, not both")
		}
		return checkColumns("im_inbox", t.Inbox, inboxKeyColumns[:])
	}
	if len(t.Msg) == 0 || len(t.Content) == 0 {
		return fmt.Errorf("cold: column definitions of conv_msg and msg_content are required")
	}
	if err := checkColumns("conv_msg", t.Msg, keyColumns[:]); err != nil {
		return err
	}
	if err := checkColumns("msg_content", t.Content, nil); err != nil {
		return err
	}
	if columnAt(t.Content, "msg_id") < 0 {
		return fmt.Errorf("cold: msg_content has no column msg_id")
	}
	return nil
}

// checkColumns: distinct names, and keys present as BIGINT UNSIGNED (the
// typed key columns hold them).
func checkColumns(table string, cols []Column, keys []string) error {
	seen := map[string]bool{}
	for _, c := range cols {
		if seen[c.Name] {
			return fmt.Errorf("cold: %s column %q listed twice", table, c.Name)
		}
		seen[c.Name] = true
	}
	for _, k := range keys {
		i := columnAt(cols, k)
		if i < 0 {
			return fmt.Errorf("cold: %s has no column %q", table, k)
		}
		if c := cols[i]; c.Type != mysql.MYSQL_TYPE_LONGLONG || c.Flags&mysql.UNSIGNED_FLAG == 0 {
			return fmt.Errorf("cold: %s.%s must be BIGINT UNSIGNED (type %d flags %#x)", table, k, c.Type, c.Flags)
		}
	}
	return nil
}

func (t Tables) msgIndex(name string) int { return columnAt(t.Msg, name) }

func columnAt(cols []Column, name string) int {
	for i, c := range cols {
		if c.Name == name {
			return i
		}
	}
	return -1
}

func (t Tables) marshal() string {
	b, err := json.Marshal(t)
	if err != nil {
		panic("[BUG] cold: marshal column definitions: " + err.Error())
	}
	return string(b)
}

func unmarshalTables(s string) (Tables, error) {
	var t Tables
	if err := json.Unmarshal([]byte(s), &t); err != nil {
		return t, fmt.Errorf("cold: column definitions in file metadata: %w", err)
	}
	return t, t.validate()
}

// TextRows returns a text-protocol result set's values byte for byte as
// the server sent them (nil for NULL, an empty non-nil slice for the empty string), the
// form Row holds. A binary-protocol result (a prepared statement's) is not
// text and is refused.
func TextRows(rs *mysql.Resultset) ([][][]byte, error) {
	if rs.Streaming != mysql.StreamingNone {
		return nil, fmt.Errorf("[BUG] cold: a streamed result set keeps no row data")
	}
	out := make([][][]byte, 0, len(rs.RowDatas))
	for _, raw := range rs.RowDatas {
		b := []byte(raw)
		row := make([][]byte, 0, len(rs.Fields))
		for range rs.Fields {
			v, isNull, n, err := mysql.LengthEncodedString(b)
			if err != nil {
				return nil, fmt.Errorf("cold: row packet: %w", err)
			}
			switch {
			case isNull:
				v = nil
			case v == nil:
				v = []byte{}
			default:
				v = bytes.Clone(v)
			}
			row = append(row, v)
			b = b[n:]
		}
		if len(b) != 0 {
			return nil, fmt.Errorf("cold: row packet has %d bytes after %d values (not the text protocol?)", len(b), len(rs.Fields))
		}
		out = append(out, row)
	}
	return out, nil
}
