package rewrite

import (
	"reflect"
	"strconv"
	"unicode/utf8"

	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/test_driver"

	"github.com/convoy-im/convoy/internal/sqlq"
)

// Inline rendering: a prepared SELECT that reaches one sharded table would be
// a different backend statement per physical table (1024 of them), so
// preparing it on the backend thrashes any per-connection statement cache
// (PREPARE + EXECUTE + CLOSE for each EXECUTE). Sharding proxies send such
// statements as text instead, with the bound values printed as literals:
// the template knows where each placeholder went (see NewTemplate).

// paramHole encodes client placeholder k as a negative hole.
func paramHole(k int) int { return -1 - k }

// Params is the number of placeholder holes (0 for templates built without,
// e.g. SubsetInsert's, whose placeholders stay plain `?` text).
func (t *Template) Params() int { return t.params }

// Bind returns args in the order Render prints the placeholders, for a
// backend prepared statement (args itself when that is the client's order).
// Arguments whose placeholders the statement no longer prints (a scatter
// plan's LIMIT, see PlanScatter) are left out.
func (t *Template) Bind(args []any) []any {
	if !t.shuffled && len(args) == t.params {
		return args
	}
	out := make([]any, 0, t.params)
	for _, h := range t.holes {
		if h < 0 && -1-h < len(args) {
			out = append(out, args[-1-h])
		}
	}
	return out
}

// RenderInline is Render with placeholder k printed as the literal of
// args[k] (see AppendLiteral). ok is false when an argument has no exact
// literal form; dst is then unusable and the caller prepares instead.
func (t *Template) RenderInline(dst []byte, phys func(logical string) (db, table string), args []any) (_ []byte, ok bool) {
	// A template of some rows (SubsetInsertHoles) numbers its holes as
	// the whole statement does: args may be longer than its holes.
	if t.params == 0 || len(args) < t.params {
		return dst, false
	}
	var stack [4][2]string
	names := stack[:0]
	for _, l := range t.logicals {
		db, tb := phys(l)
		names = append(names, [2]string{db, tb})
	}
	for i, h := range t.holes {
		dst = append(dst, t.parts[i]...)
		if h < 0 {
			if -1-h >= len(args) {
				return dst, false
			}
			if dst, ok = AppendLiteral(dst, args[-1-h]); !ok {
				return dst, false
			}
			continue
		}
		if names[h][0] != "" { // "": a logical statement (the outbox's), unqualified
			dst = sqlq.AppendIdent(dst, names[h][0])
			dst = append(dst, '.')
		}
		dst = sqlq.AppendIdent(dst, names[h][1])
	}
	return append(dst, t.parts[len(t.parts)-1]...), true
}

// AppendLiteral prints a bound value (as go-mysql's server decodes binary
// parameters) as an SQL literal that means the same to MariaDB in a session
// without NO_BACKSLASH_ESCAPES and with a character set that has no
// multi-byte sequence containing 0x5c (Convoy refuses the others): integers
// in decimal, strings single-quoted with backslash escapes, nil as NULL; a
// Literal (from Normalize) as the client's own token.
// Floating-point values and bytes that are not UTF-8 report !ok (a literal
// would be DECIMAL or need a precision argument to round-trip; arbitrary
// bytes in a utf8mb4 literal could be checked as text), so they go through a
// prepared statement.
func AppendLiteral(dst []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case Literal:
		return append(dst, x.Raw...), true
	case nil:
		return append(dst, "NULL"...), true
	case int8:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int16:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int32:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int64:
		return strconv.AppendInt(dst, x, 10), true
	case int:
		return strconv.AppendInt(dst, int64(x), 10), true
	case uint8:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint16:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint32:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint64:
		return strconv.AppendUint(dst, x, 10), true
	case []byte:
		if !utf8.Valid(x) {
			return dst, false // arbitrary bytes stay a bound parameter
		}
		return appendQuoted(dst, x), true
	case string:
		if !utf8.Valid([]byte(x)) {
			return dst, false
		}
		return appendQuoted(dst, []byte(x)), true
	}
	return dst, false
}

func appendQuoted(dst, s []byte) []byte {
	dst = append(dst, '\'')
	for _, c := range s {
		switch c {
		case 0:
			dst = append(dst, '\\', '0')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case 0x1a:
			dst = append(dst, '\\', 'Z')
		case '\\', '\'', '"':
			dst = append(dst, '\\', c)
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '\'')
}

// InlineShape reports whether a prepared statement may be sent as text with
// its values inlined: every placeholder sits where a literal means what the
// bound value means. That is WHERE and LIMIT / OFFSET of a plain SELECT,
// UPDATE or DELETE, the assigned values of an UPDATE, and the VALUES (and ON
// DUPLICATE KEY UPDATE values) of an INSERT / REPLACE. Not the select list
// (a literal there changes the result's metadata) nor ORDER BY / GROUP BY
// (`ORDER BY 1` means a column position, `ORDER BY ?` does not). limit lists
// the placeholders of LIMIT / OFFSET (by index), which may only be inlined
// as non-negative integers: MariaDB rejects anything else there. assigned
// lists the placeholders that are a whole value stored into a column (an
// INSERT value, an UPDATE or ON DUPLICATE KEY UPDATE assignment): there
// bytes that are not UTF-8 may be inlined as BinaryLiteral: a binary or
// UTF-8 column stores or refuses it as it would the bound bytes of a UTF-8
// client (the caller checks the session's character set).
func InlineShape(a *Analysis) (ok bool, limit, assigned []int) {
	if a.ParamCount == 0 {
		return false, nil, nil
	}
	vals := markerCollector{index: a.params}
	lim := markerCollector{index: a.params}
	visit := func(c *markerCollector, n ast.Node) {
		if n != nil && !reflect.ValueOf(n).IsNil() {
			n.Accept(c)
		}
	}
	assign := func(e ast.ExprNode) {
		if m, ok := e.(*test_driver.ParamMarkerExpr); ok {
			assigned = append(assigned, a.params[m])
		}
		visit(&vals, e)
	}
	switch st := a.Stmt.(type) {
	case *ast.SelectStmt:
		if st.LockInfo != nil {
			return false, nil, nil
		}
		visit(&vals, st.Where)
		visit(&lim, st.Limit)
	case *ast.UpdateStmt:
		for _, as := range st.List {
			assign(as.Expr)
		}
		visit(&vals, st.Where)
		visit(&lim, st.Limit)
	case *ast.DeleteStmt:
		visit(&vals, st.Where)
		visit(&lim, st.Limit)
	case *ast.InsertStmt:
		if st.Select != nil {
			return false, nil, nil
		}
		for _, row := range st.Lists {
			for _, e := range row {
				assign(e)
			}
		}
		for _, as := range st.OnDuplicate {
			assign(as.Expr)
		}
	default:
		return false, nil, nil
	}
	if len(vals.found)+len(lim.found) != a.ParamCount {
		return false, nil, nil
	}
	return true, lim.found, assigned
}

// BinaryLiteral is the literal of bytes that are not UTF-8, for a value
// stored into a column (InlineShape's assigned placeholders): a binary
// string, as a bound parameter's bytes are when they are stored. _binary
// keeps it a string where a bare X'..' would be a number.
func BinaryLiteral(b []byte) Literal {
	const hex = "0123456789ABCDEF"
	out := make([]byte, 0, len(b)*2+11)
	out = append(out, "_binary X'"...)
	for _, c := range b {
		out = append(out, hex[c>>4], hex[c&15])
	}
	return Literal{Raw: string(append(out, '\'')), Val: b}
}

type markerCollector struct {
	index map[*test_driver.ParamMarkerExpr]int
	found []int
}

func (m *markerCollector) Enter(n ast.Node) (ast.Node, bool) {
	if p, ok := n.(*test_driver.ParamMarkerExpr); ok {
		m.found = append(m.found, m.index[p])
	}
	return n, false
}

func (m *markerCollector) Leave(n ast.Node) (ast.Node, bool) { return n, true }
