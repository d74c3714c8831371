package rewrite

import (
	"regexp"
	"strings"
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
	space := func() {
		if s := b.String(); s != "" && s[len(s)-1] != ' ' {
			b.WriteByte(' ')
		}
	}
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			space()
			i++
		case c == '\'' || c == '"':
			end, ok := quotedEnd(sql, i)
			b.WriteByte('?')
			if !ok {
				return finishDigest(b.String())
			}
			i = end
		case c == '`':
			j := i + 1
			for ; j < len(sql); j++ {
				if sql[j] == '`' {
					if j+1 < len(sql) && sql[j+1] == '`' {
						j++ // a doubled backquote is part of the name
						continue
					}
					break
				}
			}
			if j >= len(sql) {
				b.WriteByte('?') // unterminated: whatever follows is not a name we know
				return finishDigest(b.String())
			}
			b.WriteString(sql[i : j+1])
			i = j + 1
		case c == '#' || (c == '-' && i+1 < len(sql) && sql[i+1] == '-'):
			// Line comment. MariaDB wants whitespace after `--`; dropping a
			// `--1` that was arithmetic loses nothing a log needs.
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
			space()
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			rest := sql[i+2:]
			switch {
			case strings.HasPrefix(rest, "!"), strings.HasPrefix(rest, "+"):
				b.WriteString(sql[i : i+3])
				i += 3
			case strings.HasPrefix(rest, "M!"):
				b.WriteString(sql[i : i+4])
				i += 4
			default:
				end := strings.Index(rest, "*/")
				if end < 0 {
					return finishDigest(b.String())
				}
				i += 2 + end + 2
				space()
			}
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(sql) && sql[i+1] >= '0' && sql[i+1] <= '9' && (i == 0 || !nameChar(sql[i-1])):
			j := i
			for j < len(sql) && (nameChar(sql[j]) || sql[j] == '.' ||
				(sql[j] == '+' || sql[j] == '-') && (sql[j-1] == 'e' || sql[j-1] == 'E')) {
				j++
			}
			b.WriteByte('?')
			i = j
		case nameChar(c):
			j := i
			for j < len(sql) && nameChar(sql[j]) {
				j++
			}
			if j < len(sql) && sql[j] == '\'' {
				// An introducer or a hex / bit / national string: one literal.
				end, ok := quotedEnd(sql, j)
				b.WriteByte('?')
				if !ok {
					return finishDigest(b.String())
				}
				i = end
				continue
			}
			b.WriteString(sql[i:j])
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	return finishDigest(b.String())
}

// quotedEnd finds the end (one past the closing quote) of the string opening
// at sql[i] with the quote character sql[i], as MariaDB's lexer does with
// backslash escapes on; ok is false when the string never ends.
func quotedEnd(sql string, i int) (end int, ok bool) {
	q := sql[i]
	for j := i + 1; j < len(sql); j++ {
		switch sql[j] {
		case '\\':
			j++
		case q:
			if j+1 < len(sql) && sql[j+1] == q {
				j++
				continue
			}
			return j + 1, true
		}
	}
	return len(sql), false
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
