package rewrite

import (
	"regexp"
	"strings"

	"github.com/convoy-im/convoy/internal/sqltext"
)

// Digest returns sql with every literal value replaced by `?` and its
// comments dropped: what a log line may say about a client's statement.
// Literals may hold message bodies, tokens or passwords, and comments any
// free text, so Digest errs on the side of masking: it must be total (it
// runs on statements the parser refused, unterminated strings included),
// and where it cannot tell a literal from a name it masks both.
//
// Unlike Normalize (which must give up on anything it cannot splice back
// exactly), Digest never gives up and its output is never executed:
//   - strings in single or double quotes, with their introducer if any
//     (_binary'..', X'..', N'..'), become `?`; an unterminated one ends the
//     digest;
//   - number tokens (anything starting with a digit, or `.` and a digit:
//     1, 1.5, 1e-3, 0x7B) become `?`;
//   - plain comments and `--` / `#` line comments disappear; the SQL inside
//     `/*! */`, `/*M! */` and `/*+ */` (executable comments, Convoy's admin
//     directives) is digested like the rest;
//   - lists of placeholders collapse: `IN (?, ?, ?)` is `IN (?,...)`, a
//     multi-row VALUES list is its first row and `,...`;
//   - whitespace runs become one space.
//
// Names (backquoted or not), keywords, operators and `?` placeholders stay.
func Digest(sql string) string {
	var b strings.Builder
	b.Grow(len(sql))
	digestInto(&b, sql)
	return finishDigest(b.String())
}

// digestInto writes the digest of sql to b; false: it stopped at an
// unterminated string, name or comment.
func digestInto(b *strings.Builder, sql string) bool {
	space := func() {
		if s := b.String(); s != "" && s[len(s)-1] != ' ' {
			b.WriteByte(' ')
		}
	}
	s := sqltext.New(sql)
	for t := s.Next(); t.Kind != sqltext.End; t = s.Next() {
		switch t.Kind {
		case sqltext.Space:
			space()
		case sqltext.String:
			b.WriteByte('?')
			if t.Open() {
				return false
			}
		case sqltext.Name:
			if t.Open() {
				b.WriteByte('?') // whatever follows is not a name we know
				return false
			}
			b.WriteString(t.Text)
		case sqltext.Comment:
			switch {
			case strings.HasPrefix(t.Text, "/*+"):
				// Convoy's directives and optimizer hints: their words are
				// digested like the rest.
				b.WriteString("/*+")
				if t.Open() {
					return digestInto(b, t.Text[3:])
				}
				if !digestInto(b, t.Text[3:len(t.Text)-2]) {
					return false
				}
				b.WriteString("*/")
			case t.Open():
				return false
			default:
				space()
			}
		case sqltext.ExecOpen:
			marker := t.Text[:strings.IndexByte(t.Text, '!')+1]
			b.WriteString(marker)
			if _, _, versioned := sqltext.Version(t); versioned {
				b.WriteByte('?') // with whatever name bytes follow its digits
				s.Seek(numberEnd(sql, t.Pos+len(marker)))
			}
		case sqltext.Var:
			// The @ only: a quoted name is masked like a string, a plain
			// one is read on as words.
			b.WriteByte('@')
			s.Seek(t.Pos + 1)
		case sqltext.Word:
			if c := t.Text[0]; c >= '0' && c <= '9' {
				b.WriteByte('?')
				s.Seek(numberEnd(sql, t.Pos))
				continue
			}
			save := *s
			if n := s.Next(); n.Kind == sqltext.String && n.Pos == t.End() && n.Text[0] == '\'' {
				// An introducer or a hex / bit / national string: one literal.
				b.WriteByte('?')
				if n.Open() {
					return false
				}
				continue
			}
			*s = save
			b.WriteString(t.Text)
		case sqltext.Punct:
			switch c := t.Text[0]; {
			case c == '-' && t.End() < len(sql) && sql[t.End()] == '-':
				// A line comment to MariaDB only before a blank; dropping
				// a "--1" that was arithmetic loses nothing a log needs,
				// and a digest of a digest stays the same.
				if nl := strings.IndexByte(sql[t.Pos:], '\n'); nl >= 0 {
					s.Seek(t.Pos + nl)
				} else {
					s.Seek(len(sql))
				}
				space()
			case c == '.' && t.End() < len(sql) && sql[t.End()] >= '0' && sql[t.End()] <= '9' && (t.Pos == 0 || !sqltext.IsNameByte(sql[t.Pos-1])):
				b.WriteByte('?')
				s.Seek(numberEnd(sql, t.Pos))
			default:
				b.WriteByte(c)
			}
		default: // ?, and the */ of an executable comment
			b.WriteString(t.Text)
		}
	}
	return true
}

// numberEnd is the end of the number token starting at i (1, 1.5, .5,
// 1e-3, 0x7B): name bytes, dots, and a sign after an exponent's e.
func numberEnd(sql string, i int) int {
	j := i
	for j < len(sql) && (sqltext.IsNameByte(sql[j]) || sql[j] == '.' ||
		(sql[j] == '+' || sql[j] == '-') && j > i && (sql[j-1] == 'e' || sql[j-1] == 'E')) {
		j++
	}
	return j
}

var (
	paramList = regexp.MustCompile(`\?(?: ?, ?\?)+`)
	rowList   = regexp.MustCompile(`(\([?,. ]*\))(?: ?, ?\([?,. ]*\))+`)
)

func finishDigest(s string) string {
	// Only the blanks the digest writes: TrimSpace would also cut Unicode
	// spaces, which are name characters to MariaDB (U+2008 before "00" is
	// one identifier, and the digest would show "00" as a number).
	s = strings.Trim(s, " ")
	if strings.IndexByte(s, '?') < 0 {
		return s
	}
	s = paramList.ReplaceAllLiteralString(s, "?,...")
	return rowList.ReplaceAllString(s, "$1,...")
}
