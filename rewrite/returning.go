package rewrite

import (
	"regexp"
	"slices"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/test_driver"
)

// SplitReturning cuts the RETURNING clause off an INSERT, REPLACE or DELETE
// (MariaDB 10.5+; GORM adds `RETURNING id` to every insert of a model with
// an auto-increment key), which the parser does not know: head is the
// statement before it, returning the select list after the keyword. ok is
// false when sql has no top-level RETURNING (outside strings, names,
// comments and parentheses) or is another statement.
func SplitReturning(sql string) (head, returning string, ok bool) {
	first, at := "", -1
	depth := 0
	for i := 0; i < len(sql); i++ {
		switch c := sql[i]; {
		case c == '\'' || c == '"' || c == '`':
			i = skipQuoted(sql, i)
		case c == '#':
			i = skipLine(sql, i)
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-' && (i+2 == len(sql) || sql[i+2] <= ' '):
			i = skipLine(sql, i)
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*' && (i+2 >= len(sql) || sql[i+2] != '!'):
			end := indexFrom(sql, i+2, "*/")
			if end < 0 {
				return "", "", false
			}
			i = end + 1
		case c == '(':
			depth++
		case c == ')':
			depth--
		case isWordByte(c) && (i == 0 || !isWordByte(sql[i-1])):
			j := i
			for j < len(sql) && isWordByte(sql[j]) {
				j++
			}
			word := sql[i:j]
			if first == "" {
				first = strings.ToUpper(word)
				switch first {
				case "INSERT", "REPLACE", "DELETE":
				default:
					return "", "", false
				}
			} else if depth == 0 && strings.EqualFold(word, "RETURNING") {
				at = i
			}
			i = j - 1
		}
	}
	if at < 0 || strings.TrimSpace(sql[at+len("RETURNING"):]) == "" {
		return "", "", false
	}
	return sql[:at], sql[at+len("RETURNING"):], true
}

func isWordByte(c byte) bool { return c == '_' || c == '$' || isAlnum(c) || c >= 0x80 }

// WordOffsets are the offsets of word (a keyword, matched without regard
// to case) in text outside quotes and backquotes, in order.
func WordOffsets(text, word string) []int {
	var out []int
	for i := 0; i < len(text); i++ {
		switch c := text[i]; c {
		case '\'', '"', '`':
			for i++; i < len(text) && text[i] != c; i++ {
				if text[i] == '\\' && c != '`' {
					i++
				}
			}
		default:
			if (i == 0 || !isWordByte(text[i-1])) && len(text) >= i+len(word) && strings.EqualFold(text[i:i+len(word)], word) &&
				(len(text) == i+len(word) || !isWordByte(text[i+len(word)])) {
				out = append(out, i)
			}
		}
	}
	return out
}

// CheckReturning parses a RETURNING select list (with p) and refuses what
// Convoy cannot send to the shards as written: placeholders (they would
// not be counted where the statement's are) and, for sharded tables,
// names qualified by a logical table (its physical name differs).
func CheckReturning(p *Parser, list string, sharded []string) error {
	stmts, err := p.Parse("SELECT " + list)
	if err != nil {
		return err
	}
	if len(stmts) != 1 {
		return unsupported("RETURNING must be the end of one statement")
	}
	v := returningChecker{sharded: sharded}
	stmts[0].Accept(&v)
	return v.err
}

type returningChecker struct {
	sharded []string
	err     error
}

func (v *returningChecker) Enter(n ast.Node) (ast.Node, bool) {
	switch x := n.(type) {
	case *test_driver.ParamMarkerExpr:
		v.err = unsupported("placeholders in RETURNING are not supported through Convoy")
	case *ast.ColumnName:
		for _, t := range v.sharded {
			if x.Table.L == t {
				v.err = unsupported("RETURNING on sharded table %s must name its columns without the table (%s, not %s.%s)", t, x.Name.O, t, x.Name.O)
			}
		}
	case *ast.TableName, *ast.SubqueryExpr:
		v.err = unsupported("RETURNING with a subquery is not supported through Convoy")
	}
	return n, v.err != nil
}

func (v *returningChecker) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// withReturning appends the statement's RETURNING clause to a template
// restored from the statement without it.
func (a *Analysis) withReturning(t *Template, err error) (*Template, error) {
	if err != nil || a.Returning == "" {
		return t, err
	}
	parts := append([]string(nil), t.parts...)
	parts[len(parts)-1] += " RETURNING" + a.Returning
	c := *t
	c.parts = parts
	c.fixed += len(" RETURNING" + a.Returning)
	return &c, nil
}

// MariaDBSpellings rewrites MariaDB-only spellings the parser does not
// know into equivalents it does: LOCK IN SHARE MODE followed by NOWAIT or
// SKIP LOCKED becomes FOR SHARE (printed back as MariaDB's LOCK IN SHARE
// MODE, see Restore), and VALUE(col), MariaDB's synonym of VALUES(col) in
// ON DUPLICATE KEY UPDATE, becomes VALUES(col). false: nothing to rewrite.
// For a text the parser refused only.
func MariaDBSpellings(text string) (string, bool) {
	type edit struct {
		at, n int
		with  string
	}
	var edits []edit
	for _, at := range WordOffsets(text, "LOCK") {
		rest := strings.Fields(text[at:])
		if len(rest) >= 5 && strings.EqualFold(rest[1], "IN") && strings.EqualFold(rest[2], "SHARE") && strings.EqualFold(rest[3], "MODE") &&
			(strings.EqualFold(rest[4], "NOWAIT") || strings.EqualFold(rest[4], "SKIP")) {
			if mode := WordOffsets(text[at:], "MODE"); len(mode) > 0 { // (offsets in text itself: no case folding of the text)
				edits = append(edits, edit{at, mode[0] + len("MODE"), "FOR SHARE"})
			}
		}
	}
	for _, at := range WordOffsets(text, "VALUE") {
		if after := strings.TrimLeft(text[at+len("VALUE"):], " \t\r\n"); strings.HasPrefix(after, "(") {
			edits = append(edits, edit{at, len("VALUE"), "VALUES"})
		}
	}
	if len(edits) == 0 {
		return text, false
	}
	slices.SortFunc(edits, func(a, b edit) int { return a.at - b.at })
	var b strings.Builder
	last := 0
	for _, e := range edits {
		b.WriteString(text[last:e.at])
		b.WriteString(e.with)
		last = e.at + e.n
	}
	b.WriteString(text[last:])
	return b.String(), true
}

// maintenanceText matches the table maintenance statements the parser does
// not know: CHECK, REPAIR and CHECKSUM TABLE.
var maintenanceText = regexp.MustCompile(`(?is)^\s*(check|repair|checksum)\s+(?:(no_write_to_binlog|local)\s+)?tables?\s+(.+?)\s*;?\s*$`)

// maintenanceOptions are the words that may follow their tables.
var maintenanceOptions = map[string]bool{"FOR": true, "UPGRADE": true, "QUICK": true, "FAST": true, "MEDIUM": true,
	"EXTENDED": true, "CHANGED": true, "USE_FRM": true, "FORCE": true}

// AnalyzeMaintenance analyzes CHECK / REPAIR / CHECKSUM TABLE, which the
// parser refuses, as a KindMaintenance statement (false: sql is not one):
// its table list is read by the parser as ANALYZE TABLE's.
func AnalyzeMaintenance(p *Parser, sql string) (*Analysis, bool, error) {
	m := maintenanceText.FindStringSubmatch(sql)
	if m == nil {
		return nil, false, nil
	}
	op, list := strings.ToLower(m[1]), m[3]
	words := strings.Fields(list)
	n := len(words)
	for n > 1 && maintenanceOptions[strings.ToUpper(words[n-1])] {
		n--
	}
	options := strings.Join(words[n:], " ")
	for i := len(words) - 1; i >= n; i-- { // the option words off the end
		list = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(list), words[i]))
	}
	stmts, err := p.Parse("ANALYZE TABLE " + list)
	if err != nil || len(stmts) != 1 {
		return nil, false, nil // not a table list: the caller reports the syntax error
	}
	a, err := Analyze(stmts[0])
	if err != nil {
		return nil, true, err
	}
	if a.Kind != KindMaintenance {
		return nil, false, nil
	}
	a.Maintenance.Op, a.Maintenance.Local, a.Maintenance.Options = op, m[2] != "", options
	return a, true, nil
}
