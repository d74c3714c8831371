// Package sqlerr holds the errors Convoy produces itself and the one table
// that turns them into what a MySQL client receives: an errno and a
// SQLSTATE of the server's own (drivers and retry logic recognise them),
// and the message. Errors from a datasource are MySQL error packets already
// and pass unchanged.
package sqlerr

import (
	"errors"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Code classifies an error of Convoy's own. Every Code has an errno and a
// SQLSTATE in codes (TestEveryCodeMapped) and a name for logs.
type Code int

const (
	Internal           Code = iota // a [BUG] or an unexpected failure
	Syntax                         // the parser refused the statement
	EmptyQuery                     // nothing but comments / whitespace
	NotSupported                   // valid SQL the proxy deliberately does not run
	BadShardKey                    // NULL, negative, overflowing or non-integer key
	ShardKeyUpdate                 // an UPDATE would move a row to another shard
	CrossShardTxn                  // a transaction would touch a second shard
	WrongArguments                 // prepared statement executed with the wrong argument count
	UnknownStmt                    // unknown prepared statement handle
	BackendUnavailable             // a datasource is down or the connection broke
	PoolTimeout                    // no backend connection freed up in time
	TxnAborted                     // the pinned connection broke; only ROLLBACK helps
	AccessDenied                   // authentication or privilege failure
	TooLarge                       // an input exceeds a configured bound
	StatementTimeout               // a datasource did not answer within the statement timeout
	ShardHeld                      // a write waited too long behind a migration hold, or its queue was full
	ShardUnavailable               // a migration switch of the shard is unresolved: its writes cannot be routed safely
	TableAccessDenied              // the account lacks the privilege for a statement on a table (1142)
	DBAccessDenied                 // the account may not use a database (1044)
	ArchivedReadOnly               // an UPDATE names archived messages (cold tier), which are read-only
	QueryInterrupted               // KILL [QUERY] of the client connection stopped the statement
	UnknownThread                  // KILL of a connection id Convoy does not have (1094)
	NotThreadOwner                 // KILL of another account's connection without admin (1095)
	TxnRolledBack                  // Convoy rolled the transaction back for a migration switch: retry it whole
	ColdIncomplete                 // a history read's archived part is incomplete and the session asked for an error (convoy_cold_partial)
	codeCount                      // keep last
)

// mysqlCode is what a client sees for one Code.
type mysqlCode struct {
	name  string // as log lines name the Code (a reason, never the message, which may quote values)
	errno uint16
	state string
}

var codes = [codeCount]mysqlCode{
	Internal:           {"internal", mysql.ER_UNKNOWN_ERROR, "HY000"},
	Syntax:             {"syntax", mysql.ER_PARSE_ERROR, "42000"},
	EmptyQuery:         {"empty_query", mysql.ER_EMPTY_QUERY, "42000"},
	NotSupported:       {"not_supported", mysql.ER_NOT_SUPPORTED_YET, "42000"},
	BadShardKey:        {"bad_shard_key", mysql.ER_WRONG_VALUE, "HY000"},
	ShardKeyUpdate:     {"shard_key_update", mysql.ER_NOT_SUPPORTED_YET, "42000"},
	CrossShardTxn:      {"cross_shard_transaction", mysql.ER_NOT_SUPPORTED_YET, "42000"},
	WrongArguments:     {"wrong_arguments", mysql.ER_WRONG_ARGUMENTS, "HY000"},
	UnknownStmt:        {"unknown_statement", mysql.ER_UNKNOWN_STMT_HANDLER, "HY000"},
	BackendUnavailable: {"backend_unavailable", mysql.ER_UNKNOWN_ERROR, "HY000"},
	PoolTimeout:        {"pool_timeout", mysql.ER_CON_COUNT_ERROR, "08004"},
	TxnAborted:         {"transaction_aborted", mysql.ER_ERROR_DURING_COMMIT, "HY000"},
	AccessDenied:       {"access_denied", mysql.ER_SPECIFIC_ACCESS_DENIED_ERROR, "42000"},
	TooLarge:           {"too_large", mysql.ER_TOO_BIG_SELECT, "42000"},
	TableAccessDenied:  {"table_access_denied", mysql.ER_TABLEACCESS_DENIED_ERROR, "42000"},
	DBAccessDenied:     {"db_access_denied", mysql.ER_DBACCESS_DENIED_ERROR, "42000"},
	// MariaDB's own errno for a statement that ran past max_statement_time
	// (ER_STATEMENT_TIMEOUT): drivers map SQLSTATE 70100 to a timeout.
	StatementTimeout: {"statement_timeout", 1969, "70100"},
	// An incomplete history page, as an error (convoy_cold_partial =
	// 'error'): the archive did not answer within cold.budget, a timeout
	// to drivers and ORMs, which retry it.
	ColdIncomplete: {"cold_incomplete", 1969, "70100"},
	// A write queued behind a migration hold past its bound: the lock wait
	// timeout drivers and ORMs already retry (the statement did nothing).
	ShardHeld: {"shard_held", mysql.ER_LOCK_WAIT_TIMEOUT, "HY000"},
	// coord.ErrShardUnavailable, through ShardHold.Fail: the proxy
	// cannot tell which datasource is authoritative for the shard; the
	// message says so and names the shard. Transient, like a datasource
	// that is down.
	ShardUnavailable: {"shard_unavailable", mysql.ER_UNKNOWN_ERROR, "HY000"},
	// An UPDATE of messages only the cold tier holds: MariaDB's "Table is
	// read only" (what a read-only table answers a write with), the
	// message naming the conversation and seqs; nothing was changed.
	ArchivedReadOnly: {"archived_read_only", mysql.ER_OPEN_AS_READONLY, "HY000"},
	// KILL, as MariaDB answers: the killed statement's 1317
	// (ER_QUERY_INTERRUPTED), an unknown id's 1094, another account's
	// connection 1095.
	QueryInterrupted: {"query_interrupted", mysql.ER_QUERY_INTERRUPTED, "70100"},
	UnknownThread:    {"unknown_thread", mysql.ER_NO_SUCH_THREAD, "HY000"},
	NotThreadOwner:   {"not_thread_owner", mysql.ER_KILL_DENIED_ERROR, "HY000"},
	// Convoy rolled the transaction back because its shard switched
	// datasources under it (or the switch could not wait for it): MariaDB's
	// deadlock error, which drivers and ORMs take as "the transaction is
	// gone, run it again".
	TxnRolledBack: {"transaction_rolled_back", mysql.ER_LOCK_DEADLOCK, "40001"},
}

func (c Code) String() string {
	if c >= 0 && c < codeCount && codes[c].name != "" {
		return codes[c].name
	}
	return fmt.Sprintf("code(%d)", int(c))
}

// Error is an error of Convoy's own: a class and a message meant for the
// client.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Errorf makes an Error of class c.
func Errorf(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Msg: fmt.Sprintf(format, args...)}
}

// Is reports whether err is an Error of class c (not wrapped).
func Is(err error, c Code) bool {
	e, ok := err.(*Error)
	return ok && e.Code == c
}

// ToMySQL maps any error to the packet the client receives. A MySQL error
// packet (a datasource's) keeps its own errno and SQLSTATE; an error that is
// neither is 1105.
func ToMySQL(err error) *mysql.MyError {
	if err == nil {
		return nil
	}
	var me *mysql.MyError
	if errors.As(err, &me) {
		return me
	}
	var ee *Error
	if errors.As(err, &ee) {
		c := Internal
		if ee.Code >= 0 && ee.Code < codeCount && codes[ee.Code].errno != 0 {
			c = ee.Code
		}
		return &mysql.MyError{Code: codes[c].errno, State: codes[c].state, Message: err.Error()}
	}
	return &mysql.MyError{Code: mysql.ER_UNKNOWN_ERROR, State: "HY000", Message: err.Error()}
}
