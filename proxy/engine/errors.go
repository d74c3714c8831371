package engine

import (
	"errors"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// Code classifies the errors the engine produces itself. The proxy package
// maps every Code to a MySQL errno and SQLSTATE in one table; a test proves
// the table is complete.
type Code int

const (
	CodeInternal           Code = iota // a [BUG] or an unexpected failure
	CodeSyntax                         // the parser refused the statement
	CodeEmptyQuery                     // nothing but comments / whitespace
	CodeNotSupported                   // valid SQL the proxy deliberately does not run
	CodeBadShardKey                    // NULL, negative, overflowing or non-integer key
	CodeShardKeyUpdate                 // an UPDATE would move a row to another shard
	CodeCrossShardTxn                  // a transaction would touch a second shard
	CodeWrongArguments                 // prepared statement executed with the wrong argument count
	CodeUnknownStmt                    // unknown prepared statement handle
	CodeBackendUnavailable             // a datasource is down or the connection broke
	CodePoolTimeout                    // no backend connection freed up in time
	CodeTxnAborted                     // the pinned connection broke; only ROLLBACK helps
	CodeAccessDenied                   // authentication or privilege failure
	CodeTooLarge                       // an input exceeds a configured bound
	CodeStatementTimeout               // a datasource did not answer within the statement timeout
	CodeShardHeld                      // a write waited too long behind a migration hold, or its queue was full
	CodeShardUnavailable               // a migration switch of the shard is unresolved: its writes cannot be routed safely
	CodeTableAccessDenied              // the account lacks the privilege for a statement on a table (1142)
	CodeDBAccessDenied                 // the account may not use a database (1044)
	CodeArchivedReadOnly               // an UPDATE names archived messages (cold tier), which are read-only
	CodeQueryInterrupted               // KILL [QUERY] of the client connection stopped the statement
	CodeUnknownThread                  // KILL of a connection id Convoy does not have (1094)
	CodeNotThreadOwner                 // KILL of another account's connection without admin (1095)
	CodeTxnRolledBack                  // Convoy rolled the transaction back for a migration switch: retry it whole
	CodeColdIncomplete                 // a history read's archived part is incomplete and the session asked for an error (convoy_cold_partial)
	codeCount                          // keep last: the mapping test iterates to it
)

// AllCodes lists every code, for the proxy's mapping-completeness test.
func AllCodes() []Code {
	out := make([]Code, 0, codeCount)
	for c := Code(0); c < codeCount; c++ {
		out = append(out, c)
	}
	return out
}

// codeNames are the Codes as log lines name them (a reason without the
// message, which may quote the client's values).
var codeNames = [codeCount]string{
	CodeInternal:           "internal",
	CodeSyntax:             "syntax",
	CodeEmptyQuery:         "empty_query",
	CodeNotSupported:       "not_supported",
	CodeBadShardKey:        "bad_shard_key",
	CodeShardKeyUpdate:     "shard_key_update",
	CodeCrossShardTxn:      "cross_shard_transaction",
	CodeWrongArguments:     "wrong_arguments",
	CodeUnknownStmt:        "unknown_statement",
	CodeBackendUnavailable: "backend_unavailable",
	CodePoolTimeout:        "pool_timeout",
	CodeTxnAborted:         "transaction_aborted",
	CodeTxnRolledBack:      "transaction_rolled_back",
	CodeColdIncomplete:     "cold_incomplete",
	CodeAccessDenied:       "access_denied",
	CodeTooLarge:           "too_large",
	CodeTableAccessDenied:  "table_access_denied",
	CodeDBAccessDenied:     "db_access_denied",
	CodeStatementTimeout:   "statement_timeout",
	CodeShardHeld:          "shard_held",
	CodeShardUnavailable:   "shard_unavailable",
	CodeArchivedReadOnly:   "archived_read_only",
	CodeQueryInterrupted:   "query_interrupted",
	CodeUnknownThread:      "unknown_thread",
	CodeNotThreadOwner:     "not_thread_owner",
}

func (c Code) String() string {
	if c >= 0 && c < codeCount && codeNames[c] != "" {
		return codeNames[c]
	}
	return fmt.Sprintf("code(%d)", int(c))
}

// Error is an engine error with a class and a message meant for the client.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func errorf(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Msg: fmt.Sprintf(format, args...)}
}

// classify turns errors from the layers below into engine errors. A MySQL
// error packet from a backend is returned unchanged: the client sees the
// server's own errno and SQLSTATE.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var (
		me  *mysql.MyError
		ee  *Error
		se  *rewrite.SyntaxError
		ke  *router.KeyError
		ue  *rewrite.UnsupportedError
		bue *backend.UnavailableError
		boe *backend.OutageError
		bte *backend.TimeoutError
		bke *backend.KilledError
	)
	switch {
	case errors.As(err, &me):
		return me
	case errors.As(err, &ee):
		return ee
	case errors.As(err, &se):
		if se.Code != 0 && se.Code != mysql.ER_PARSE_ERROR && se.Code < 2000 && se.State != "" {
			// The parser's own errno for what it refuses (1083 a field
			// separator, 1115 an unknown character set), as MariaDB's;
			// TiDB's own errnos (8000 and up) stay 1064.
			return &mysql.MyError{Code: se.Code, State: se.State, Message: se.Msg}
		}
		return &Error{Code: CodeSyntax, Msg: se.Msg}
	case errors.As(err, &ke):
		return &Error{Code: CodeBadShardKey, Msg: ke.Error()}
	case errors.Is(err, rewrite.ErrColumnCount):
		return &mysql.MyError{Code: mysql.ER_WRONG_VALUE_COUNT_ON_ROW, State: "21S01", Message: err.Error()}
	case errors.Is(err, rewrite.ErrRollupOrder):
		return &mysql.MyError{Code: mysql.ER_WRONG_USAGE, State: "HY000", Message: "Incorrect usage of CUBE/ROLLUP and ORDER BY"}
	case errors.Is(err, rewrite.ErrShardKeyUpdate):
		return &Error{Code: CodeShardKeyUpdate, Msg: err.Error()}
	case errors.As(err, &ue):
		return &Error{Code: CodeNotSupported, Msg: ue.Error()}
	case errors.Is(err, backend.ErrPoolTimeout):
		return &Error{Code: CodePoolTimeout, Msg: err.Error()}
	case errors.As(err, &bte):
		return &Error{Code: CodeStatementTimeout, Msg: bte.Error()}
	case errors.As(err, &bke):
		return &Error{Code: CodeQueryInterrupted, Msg: bke.Error()}
	case errors.As(err, &boe): // before bue: it wraps the failure that opened the breaker
		return &Error{Code: CodeBackendUnavailable, Msg: boe.Error()}
	case errors.As(err, &bue):
		return &Error{Code: CodeBackendUnavailable, Msg: bue.Error()}
	}
	return &Error{Code: CodeInternal, Msg: err.Error()}
}

// connLost reports an error after which a backend connection was dropped
// with its state unknown: the datasource is unavailable, the connection
// broke, or the statement ran past the statement timeout.
func connLost(err error) bool {
	ce := classify(err)
	return isCode(ce, CodeBackendUnavailable) || isCode(ce, CodeStatementTimeout) || isCode(ce, CodeQueryInterrupted)
}

// backendFailure reports an error a datasource caused (or a connection to
// it), as opposed to a refusal of the engine's own (a transaction rule):
// it counts in the shard's error metrics.
func backendFailure(err error) bool {
	ce := classify(err)
	return !isCode(ce, CodeCrossShardTxn) && !isCode(ce, CodeTxnAborted) && !isCode(ce, CodeTxnRolledBack)
}
