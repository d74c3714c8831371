package proxy

import (
	"errors"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/engine"
)

// mysqlCode is what a client sees for one engine error class.
type mysqlCode struct {
	errno uint16
	state string
}

// codes is the one place engine errors become MySQL errors. Every engine
// Code must appear (TestErrorMapComplete); errnos are real server errnos so
// drivers and retry logic recognise them.
var codes = map[engine.Code]mysqlCode{
	engine.CodeInternal:           {mysql.ER_UNKNOWN_ERROR, "HY000"},
	engine.CodeSyntax:             {mysql.ER_PARSE_ERROR, "42000"},
	engine.CodeEmptyQuery:         {mysql.ER_EMPTY_QUERY, "42000"},
	engine.CodeNotSupported:       {mysql.ER_NOT_SUPPORTED_YET, "42000"},
	engine.CodeBadShardKey:        {mysql.ER_WRONG_VALUE, "HY000"},
	engine.CodeShardKeyUpdate:     {mysql.ER_NOT_SUPPORTED_YET, "42000"},
	engine.CodeCrossShardTxn:      {mysql.ER_NOT_SUPPORTED_YET, "42000"},
	engine.CodeWrongArguments:     {mysql.ER_WRONG_ARGUMENTS, "HY000"},
	engine.CodeUnknownStmt:        {mysql.ER_UNKNOWN_STMT_HANDLER, "HY000"},
	engine.CodeBackendUnavailable: {mysql.ER_UNKNOWN_ERROR, "HY000"},
	engine.CodePoolTimeout:        {mysql.ER_CON_COUNT_ERROR, "08004"},
	engine.CodeTxnAborted:         {mysql.ER_ERROR_DURING_COMMIT, "HY000"},
	engine.CodeAccessDenied:       {mysql.ER_SPECIFIC_ACCESS_DENIED_ERROR, "42000"},
	engine.CodeTooLarge:           {mysql.ER_TOO_BIG_SELECT, "42000"},
	engine.CodeTableAccessDenied:  {mysql.ER_TABLEACCESS_DENIED_ERROR, "42000"},
	engine.CodeDBAccessDenied:     {mysql.ER_DBACCESS_DENIED_ERROR, "42000"},
	// MariaDB's own errno for a statement that ran past max_statement_time
	// (ER_STATEMENT_TIMEOUT): drivers map SQLSTATE 70100 to a timeout.
	engine.CodeStatementTimeout: {1969, "70100"},
	// An incomplete history page, as an error (convoy_cold_partial =
	// 'error'): the archive did not answer within cold.budget, a timeout
	// to drivers and ORMs, which retry it.
	engine.CodeColdIncomplete: {1969, "70100"},
	// A write queued behind a migration hold past its bound: the lock wait
	// timeout drivers and ORMs already retry (the statement did nothing).
	engine.CodeShardHeld: {mysql.ER_LOCK_WAIT_TIMEOUT, "HY000"},
	// routecfg.ErrShardUnavailable, through ShardHold.Fail: the proxy
	// cannot tell which datasource is authoritative for the shard; the
	// message says so and names the shard. Transient, like a datasource
	// that is down.
	engine.CodeShardUnavailable: {mysql.ER_UNKNOWN_ERROR, "HY000"},
	// An UPDATE of messages only the cold tier holds: MariaDB's "Table is
	// read only" (what a read-only table answers a write with), the
	// message naming the conversation and seqs; nothing was changed.
	engine.CodeArchivedReadOnly: {mysql.ER_OPEN_AS_READONLY, "HY000"},
	// KILL, as MariaDB answers: the killed statement's 1317
	// (ER_QUERY_INTERRUPTED), an unknown id's 1094, another account's
	// connection 1095.
	engine.CodeQueryInterrupted: {mysql.ER_QUERY_INTERRUPTED, "70100"},
	engine.CodeUnknownThread:    {mysql.ER_NO_SUCH_THREAD, "HY000"},
	engine.CodeNotThreadOwner:   {mysql.ER_KILL_DENIED_ERROR, "HY000"},
	// Convoy rolled the transaction back because its shard switched
	// datasources under it (or the switch could not wait for it): MariaDB's
	// deadlock error, which drivers and ORMs take as "the transaction is
	// gone, run it again".
	engine.CodeTxnRolledBack: {mysql.ER_LOCK_DEADLOCK, "40001"},
}

// toMySQL maps any error to the packet the client receives. Backend error
// packets keep their own errno and SQLSTATE.
func toMySQL(err error) *mysql.MyError {
	if err == nil {
		return nil
	}
	var me *mysql.MyError
	if errors.As(err, &me) {
		return me
	}
	var ee *engine.Error
	if errors.As(err, &ee) {
		c, ok := codes[ee.Code]
		if !ok {
			c = codes[engine.CodeInternal]
		}
		return &mysql.MyError{Code: c.errno, State: c.state, Message: err.Error()}
	}
	return &mysql.MyError{Code: mysql.ER_UNKNOWN_ERROR, State: "HY000", Message: err.Error()}
}
