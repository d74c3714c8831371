package rewrite

import (
	"errors"
	"strings"

	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/format"
	"github.com/pingcap/tidb/pkg/parser/mysql"
	"github.com/pingcap/tidb/pkg/parser/terror"

	// The parser needs a value-expression driver to build literals.
	_ "github.com/pingcap/tidb/pkg/parser/test_driver"
)

// Parser wraps one TiDB parser. Not safe for concurrent use: one per session.
type Parser struct {
	p      *parser.Parser
	mode   mysql.SQLMode // set on p; kept to set again on a fresh parser
	parses int
}

// NewParser returns a parser in the default SQL mode (backslash escapes on,
// ANSI_QUOTES off), which is what the restorer's output assumes.
func NewParser() *Parser {
	return &Parser{p: parser.New()}
}

// SetSQLMode makes the lexer follow a session's sql_mode (e.g. ANSI_QUOTES,
// NO_BACKSLASH_ESCAPES). The restorer always prints backslash-escaped
// single-quoted strings and backquoted names, so a backend session that will
// receive restored SQL must not run with NO_BACKSLASH_ESCAPES.
func (p *Parser) SetSQLMode(sqlMode string) error {
	m, err := mysql.GetSQLMode(sqlMode)
	if err != nil {
		return err
	}
	p.p.SetSQLMode(m)
	p.mode = m
	return nil
}

// SyntaxError is a statement the parser rejected. Msg is the MySQL-like text
// ("You have an error in your SQL syntax; ... near '...'"); Code is the MySQL
// errno the parser attached (1064 for plain syntax errors, e.g. 1115 for an
// unknown character set introducer).
type SyntaxError struct {
	Msg   string
	Code  uint16
	State string // the errno's SQLSTATE, where the parser gave one
}

func (e *SyntaxError) Error() string { return e.Msg }

// Parse parses one or more statements. Syntax errors are returned as *SyntaxError.
func (p *Parser) Parse(sql string) (stmts []ast.StmtNode, err error) {
	defer func() {
		if r := recover(); r != nil {
			// The parser's literal driver panics on what it cannot
			// represent: a decimal literal of more than 81 digits
			// ("not implemented ... MyDecimal"). A client's statement must
			// get an error, not drop its connection; a fresh parser
			// replaces the one the panic left mid-statement.
			p.p = parser.New()
			p.p.SetSQLMode(p.mode)
			stmts, err = nil, &SyntaxError{Msg: syntaxPrefix + "near a literal the parser cannot represent (a number of more than 81 digits?)", Code: mysql.ErrParse}
		}
	}()
	p.parses++
	stmts, _, err = p.p.Parse(sql, "", "")
	if err != nil {
		return nil, toSyntaxError(err)
	}
	return stmts, nil
}

// Parses is how many texts the parser has parsed (tests: a statement is
// parsed once).
func (p *Parser) Parses() int { return p.parses }

func toSyntaxError(err error) *SyntaxError {
	var te *terror.Error
	if errors.As(err, &te) { // e.g. 1115 unknown character set
		se := terror.ToSQLError(te)
		return &SyntaxError{Msg: se.Message, Code: se.Code, State: se.State}
	}
	// The lexer's own errors are plain text (`line 1 column 5 near "..."`);
	// TiDB's server prefixes them the same way.
	return &SyntaxError{Msg: syntaxPrefix + strings.TrimSpace(err.Error()), Code: mysql.ErrParse} // 1064, as MySQL
}

const syntaxPrefix = "You have an error in your SQL syntax; check the manual that corresponds to your MySQL server version for the right syntax to use "

// restoreFlags print keywords upper-case, names backquoted and strings
// single-quoted with backslashes escaped, so that a string literal means the
// same bytes to a backend in the default sql_mode as it did to our lexer.
// TiDB-only syntax is wrapped in /*T! */ comments, which MySQL ignores.
// The parser tags every string literal with the connection charset
// (utf8mb4); without RestoreStringWithoutDefaultCharset every literal would
// be printed as _UTF8MB4'...'. The price: an explicit _utf8mb4 introducer is
// dropped too, which is harmless while sessions use utf8mb4.
const restoreFlags = format.RestoreStringSingleQuotes |
	format.RestoreStringWithoutDefaultCharset |
	format.RestoreStringEscapeBackslash |
	format.RestoreKeyWordUppercase |
	format.RestoreNameBackQuotes |
	format.RestoreTiDBSpecialComment

// Restore prints a node with the package's restore flags.
func Restore(node ast.Node) (string, error) {
	var sb strings.Builder
	if s, ok := node.(ast.StmtNode); ok {
		sb.Grow(len(s.Text()) + 64) // names gain backquotes
	}
	if err := node.Restore(format.NewRestoreCtx(restoreFlags, &sb)); err != nil {
		return "", err
	}
	return mariadbShareLock(sb.String()), nil
}
