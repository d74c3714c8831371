package rewrite

import (
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
)

// FromNoBackslashEscapes rewrites a statement written for a session with
// sql_mode NO_BACKSLASH_ESCAPES into the same statement for a session
// without it, which is how Convoy parses and how its backend connections
// run: in every string literal ('...' and "..."; ANSI_QUOTES is refused
// through Convoy) a backslash, there an ordinary character, is doubled, so
// the literal keeps its value; a doubled quote means the same in both
// modes. Names in backquotes and comments are kept byte for byte, except
// executable comments (/*! ... */, /*M! ... */), which are SQL. The text
// is scanned as the server scans it in that mode: a backslash never
// escapes the closing quote. Multibyte character sets whose characters may
// contain the byte 0x5C are refused through Convoy, so bytes suffice.
func FromNoBackslashEscapes(sql string) string {
	if strings.IndexByte(sql, '\\') < 0 {
		return sql // nothing to double: the common case costs one scan
	}
	var b strings.Builder
	b.Grow(len(sql) + 8)
	inExec := false // inside an executable comment: SQL until */
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '\'' || c == '"':
			b.WriteByte(c)
			i++
			for i < len(sql) {
				d := sql[i]
				if d == c {
					if i+1 < len(sql) && sql[i+1] == c { // a doubled quote
						b.WriteString(sql[i : i+2])
						i += 2
						continue
					}
					break
				}
				if d == '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(d)
				i++
			}
			if i < len(sql) {
				b.WriteByte(c)
				i++
			}
		case c == '`':
			j := i + 1
			for j < len(sql) {
				if sql[j] == '`' {
					if j+1 < len(sql) && sql[j+1] == '`' {
						j += 2
						continue
					}
					break
				}
				j++
			}
			end := min(j+1, len(sql))
			b.WriteString(sql[i:end])
			i = end
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			if executed(sql[i:]) {
				inExec = true
				b.WriteString("/*")
				i += 2
				continue
			}
			end := strings.Index(sql[i+2:], "*/")
			if end < 0 {
				b.WriteString(sql[i:])
				return b.String()
			}
			b.WriteString(sql[i : i+2+end+2])
			i += 2 + end + 2
		case c == '*' && inExec && strings.HasPrefix(sql[i:], "*/"):
			inExec = false
			b.WriteString("*/")
			i += 2
		case c == '#' || c == '-' && strings.HasPrefix(sql[i:], "--") && (i+2 == len(sql) || sql[i+2] <= ' '):
			// ("--" starts a comment before a space or a control character.)
			end := strings.IndexByte(sql[i:], '\n')
			if end < 0 {
				b.WriteString(sql[i:])
				return b.String()
			}
			b.WriteString(sql[i : i+end+1])
			i += end + 1
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

// LikesWithoutEscape gives every LIKE of n written without an ESCAPE
// clause an empty one (ESCAPE ”), which is how a session with
// NO_BACKSLASH_ESCAPES reads such a LIKE (a backslash is then no escape
// character for binary strings, and still one for others: MariaDB gives
// ESCAPE ” exactly that meaning); it reports whether it changed one.
// (The parser reads the text with the standard default, ESCAPE '\\'.)
func LikesWithoutEscape(n ast.Node) bool {
	v := &likeEscapes{}
	n.Accept(v)
	return v.changed
}

type likeEscapes struct{ changed bool }

func (v *likeEscapes) Enter(n ast.Node) (ast.Node, bool) {
	if l, ok := n.(*ast.PatternLikeOrIlikeExpr); ok && !l.EscapeExplicit {
		l.EscapeExplicit, l.Escape, v.changed = true, 0, true
	}
	return n, false
}

func (v *likeEscapes) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// NameFieldsAsWritten names the unaliased computed columns of stmt's
// select list whose text has a backslash in a string literal as the
// client wrote them before FromNoBackslashEscapes doubled it (MariaDB
// names such a column by the statement's text): each gets that text as
// its alias. It reports whether it named one.
func NameFieldsAsWritten(stmt ast.Node) bool {
	sel, ok := stmt.(*ast.SelectStmt)
	if !ok || sel.Fields == nil {
		return false
	}
	changed := false
	for _, f := range sel.Fields.Fields {
		if f.WildCard != nil || f.AsName.O != "" || f.Expr == nil {
			continue
		}
		switch f.Expr.(type) {
		case *ast.ColumnNameExpr, ast.ValueExpr:
			continue // named by the column, or by the value
		}
		if text := f.Text(); strings.Contains(text, `\\`) {
			f.AsName = ast.NewCIStr(halveEscapes(strings.TrimSpace(text)))
			changed = true
		}
	}
	return changed
}

// halveEscapes undoes FromNoBackslashEscapes on a text it produced: in
// string literals, each doubled backslash becomes one.
func halveEscapes(text string) string {
	var b strings.Builder
	for i := 0; i < len(text); i++ {
		c := text[i]
		b.WriteByte(c)
		if c != '\'' && c != '"' {
			continue
		}
		for i++; i < len(text); i++ {
			d := text[i]
			if d == '\\' && i+1 < len(text) && text[i+1] == '\\' {
				b.WriteByte('\\')
				i++
				continue
			}
			b.WriteByte(d)
			if d == c {
				if i+1 < len(text) && text[i+1] == c {
					b.WriteByte(c)
					i++
					continue
				}
				break
			}
		}
	}
	return b.String()
}

// executed reports whether the comment at the start of text is one the
// server runs as SQL: /*! ... */, /*M! ... */, with an optional version
// (5 or 6 digits) no newer than the servers Convoy runs on (MariaDB 10.x
// and 11.x: below 120000); a newer one is a plain comment to the server.
func executed(text string) bool {
	var rest string
	switch {
	case strings.HasPrefix(text, "/*!"):
		rest = text[3:]
	case strings.HasPrefix(text, "/*M!"):
		rest = text[4:]
	default:
		return false
	}
	n := 0
	for n < len(rest) && n < 6 && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n < 5 {
		return true // no version: always run
	}
	v := 0
	for _, d := range rest[:n] {
		v = v*10 + int(d-'0')
	}
	return v < 120000
}
