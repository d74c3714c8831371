package rewrite

import (
	"strings"

	"github.com/convoy-im/convoy/internal/sqltext"
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
	s := sqltext.New(sql)
	// Read as the server reads it in that mode; an executable comment
	// newer than the servers Convoy runs on (MariaDB 10.x and 11.x: below
	// 120000) is a plain comment to them.
	s.NoBackslashEscapes, s.PlainAbove = true, 119999
	for t := s.Next(); t.Kind != sqltext.End; t = s.Next() {
		if quotesString(t) {
			b.WriteString(strings.ReplaceAll(t.Text, `\`, `\\`))
		} else {
			b.WriteString(t.Text)
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
	s := sqltext.New(text)
	for t := s.Next(); t.Kind != sqltext.End; t = s.Next() {
		if quotesString(t) {
			b.WriteString(strings.ReplaceAll(t.Text, `\\`, `\`))
		} else {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// quotesString: t is a string literal, or a user variable whose name is
// quoted like one (@'name', @"name"), which the lexer reads as a string.
func quotesString(t sqltext.Token) bool {
	return t.Kind == sqltext.String || t.Kind == sqltext.Var && len(t.Text) > 1 && (t.Text[1] == '\'' || t.Text[1] == '"')
}
