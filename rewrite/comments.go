package rewrite

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxSharedVersion is the highest version number of a `/*!NNNNN ... */`
// comment that MariaDB and the parser both execute. MariaDB skips some
// MySQL-only version comments (5.7+ and "never" markers like 99999) that the
// parser would execute: the proxy and the server would then disagree about
// which rows a statement touches.
const maxSharedVersion = 50699

// CheckComments refuses executable comments whose meaning the proxy cannot
// share with MariaDB: `/*M! ... */` (MariaDB-only, the parser ignores it),
// `/*!NNNNN ... */` above maxSharedVersion, and an unterminated executable
// comment (MariaDB: syntax error; the parser: executes to the end). Plain
// `/*! ... */` and old version comments (mysqldump's 40101, 50003, ...) are
// SQL and are routed as such.
//
// It also refuses bytes that are not UTF-8 outside string literals and
// comments: the lexer replaces them with '?', so the statement the proxy
// would send is not the one the client wrote (found by fuzzing).
func CheckComments(sql string) error {
	for i := 0; i < len(sql); i++ {
		if c := sql[i]; c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(sql[i:])
			if r == utf8.RuneError && size == 1 {
				return &SyntaxError{Msg: fmt.Sprintf("You have an error in your SQL syntax: byte 0x%02x at offset %d is not UTF-8 (only string literals may hold arbitrary bytes)", c, i), Code: 1064}
			}
			i += size - 1
			continue
		}
		switch c := sql[i]; c {
		case '\'', '"':
			i = skipQuoted(sql, i)
		case '`':
			end := skipQuoted(sql, i)
			if !utf8.ValidString(sql[i:min(end+1, len(sql))]) {
				return &SyntaxError{Msg: fmt.Sprintf("You have an error in your SQL syntax: the quoted name at offset %d is not UTF-8", i), Code: 1064}
			}
			i = end
		case '#':
			i = skipLine(sql, i)
		case '-':
			if i+2 < len(sql) && sql[i+1] == '-' && (sql[i+2] <= ' ') || i+2 == len(sql) && sql[i+1] == '-' {
				i = skipLine(sql, i)
			}
		case '/':
			if i+1 >= len(sql) || sql[i+1] != '*' {
				continue
			}
			end := indexFrom(sql, i+2, "*/")
			body := i + 2
			switch {
			case body < len(sql) && sql[body] == '!':
				if end < 0 {
					return &SyntaxError{Msg: "You have an error in your SQL syntax: unterminated executable comment /*! ...", Code: 1064}
				}
				j := body + 1
				for j < len(sql) && j < body+7 && sql[j] >= '0' && sql[j] <= '9' {
					j++
				}
				if digits := sql[body+1 : j]; digits != "" {
					if v, err := strconv.Atoi(digits); err != nil || v > maxSharedVersion {
						return unsupported("the version comment /*!%s ... */ is executed differently by MariaDB and by Convoy's parser; remove it or use a plain /*! ... */", digits)
					}
				}
			case body+1 < len(sql) && sql[body] == 'M' && sql[body+1] == '!':
				return unsupported("MariaDB executable comments /*M! ... */ are not supported through Convoy: the router cannot see what they run")
			}
			if end < 0 {
				return nil // an unterminated plain comment: the parser reports it
			}
			if sql[body] == '!' {
				// Its content is SQL: keep scanning inside it.
				continue
			}
			i = end + 1
		}
	}
	return nil
}

func indexFrom(s string, from int, sub string) int {
	for i := from; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func skipLine(s string, i int) int {
	for i < len(s) && s[i] != '\n' {
		i++
	}
	return i
}

// skipQuoted returns the index of the closing quote of the literal or
// identifier opened at i (backslash escapes in strings, doubled quotes).
func skipQuoted(s string, i int) int {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			if j+1 < len(s) && s[j+1] == q {
				j++
				continue
			}
			return j
		}
	}
	return len(s)
}

// OnlyComments reports whether sql, in which the parser found no statement,
// holds a comment: MariaDB answers such a query (`-- note`, `# note`,
// `/* note */`, what `mariadb -c` sends for a comment line) with OK, and only
// one of nothing but blanks and semicolons with 1065 "Query was empty".
func OnlyComments(sql string) bool {
	return strings.TrimLeft(sql, " \t\r\n\f\v;") != ""
}

// StripComments returns sql with its comments replaced by spaces (an
// executable comment's content stays: it is SQL), quoted strings and names
// untouched. For reading a statement's leading words, not for sending.
func StripComments(sql string) string {
	var b strings.Builder
	last := 0
	cut := func(from, to int) {
		b.WriteString(sql[last:from])
		b.WriteByte(' ')
		last = to
	}
	for i := 0; i < len(sql); i++ {
		switch c := sql[i]; c {
		case '\'', '"', '`':
			i = skipQuoted(sql, i)
		case '#':
			end := skipLine(sql, i)
			cut(i, end)
			i = end
		case '-':
			if i+1 < len(sql) && sql[i+1] == '-' && (i+2 == len(sql) || sql[i+2] <= ' ') {
				end := skipLine(sql, i)
				cut(i, end)
				i = end
			}
		case '/':
			if i+1 >= len(sql) || sql[i+1] != '*' {
				continue
			}
			end := indexFrom(sql, i+2, "*/")
			if end < 0 {
				end = len(sql) - 2
			}
			if i+2 < len(sql) && sql[i+2] == '!' {
				// /*!NNNNN body */: keep the body.
				j := i + 3
				for j < len(sql) && j < i+9 && sql[j] >= '0' && sql[j] <= '9' {
					j++
				}
				cut(i, j)
				b.WriteString(sql[j:end])
				b.WriteByte(' ')
				last = end + 2
			} else {
				cut(i, end+2)
			}
			i = end + 1
		}
	}
	if last < len(sql) {
		b.WriteString(sql[last:])
	}
	return b.String()
}
