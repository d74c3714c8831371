package rewrite

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/convoy-im/convoy/internal/sqltext"
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
	s := sqltext.New(sql)
	for t := s.Next(); t.Kind != sqltext.End; t = s.Next() {
		switch t.Kind {
		case sqltext.Word:
			if err := checkUTF8(t); err != nil {
				return err
			}
		case sqltext.Var:
			switch name := t.Text[1:]; {
			case name != "" && name[0] == '`':
				if err := checkQuotedName(t.Text[1:], t.Pos+1); err != nil {
					return err
				}
			case name != "" && (name[0] == '\'' || name[0] == '"'):
				// A quoted user variable name: a string, any bytes.
			default:
				if err := checkUTF8(t); err != nil {
					return err
				}
			}
		case sqltext.Name:
			if err := checkQuotedName(t.Text, t.Pos); err != nil {
				return err
			}
		case sqltext.ExecOpen:
			if err := checkExec(t); err != nil {
				return err
			}
		case sqltext.Comment:
			if strings.HasPrefix(t.Text, "/*!") || strings.HasPrefix(t.Text, "/*M!") {
				// One nested in an executable comment: whether the
				// server runs it is not worth guessing; check it alike.
				if err := checkExec(t); err != nil {
					return err
				}
			}
			if t.Open() {
				return nil // an unterminated plain comment: the parser reports it
			}
		}
	}
	return nil
}

// checkExec refuses an executable comment the parser would read otherwise
// than MariaDB.
func checkExec(t sqltext.Token) error {
	v, mariadb, versioned := sqltext.Version(t)
	switch {
	case mariadb:
		return unsupported("MariaDB executable comments /*M! ... */ are not supported through Convoy: the router cannot see what they run")
	case t.Open():
		return &SyntaxError{Msg: "You have an error in your SQL syntax: unterminated executable comment /*! ...", Code: 1064}
	case versioned && v > maxSharedVersion:
		return unsupported("the version comment /*!%s ... */ is executed differently by MariaDB and by Convoy's parser; remove it or use a plain /*! ... */", t.Text[len("/*!"):len("/*!")+len(strconv.Itoa(v))])
	}
	return nil
}

// checkUTF8 refuses a word or variable holding bytes that are not UTF-8.
func checkUTF8(t sqltext.Token) error {
	for i := 0; i < len(t.Text); {
		r, size := utf8.DecodeRuneInString(t.Text[i:])
		if r == utf8.RuneError && size == 1 {
			return &SyntaxError{Msg: fmt.Sprintf("You have an error in your SQL syntax: byte 0x%02x at offset %d is not UTF-8 (only string literals may hold arbitrary bytes)", t.Text[i], t.Pos+i), Code: 1064}
		}
		i += size
	}
	return nil
}

func checkQuotedName(name string, at int) error {
	if !utf8.ValidString(name) {
		return &SyntaxError{Msg: fmt.Sprintf("You have an error in your SQL syntax: the quoted name at offset %d is not UTF-8", at), Code: 1064}
	}
	return nil
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
	b.Grow(len(sql))
	s := sqltext.New(sql)
	for t := s.Next(); t.Kind != sqltext.End; t = s.Next() {
		switch t.Kind {
		case sqltext.Comment, sqltext.ExecOpen, sqltext.ExecClose:
			b.WriteByte(' ')
		default:
			b.WriteString(t.Text)
		}
	}
	return b.String()
}
