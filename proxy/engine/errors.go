package engine

import (
	"errors"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// classify turns errors from the layers below into engine errors. A MySQL
// error packet from a backend is returned unchanged: the client sees the
// server's own errno and SQLSTATE.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var (
		me  *mysql.MyError
		ee  *sqlerr.Error
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
		return &sqlerr.Error{Code: sqlerr.Syntax, Msg: se.Msg}
	case errors.As(err, &ke):
		return &sqlerr.Error{Code: sqlerr.BadShardKey, Msg: ke.Error()}
	case errors.Is(err, rewrite.ErrColumnCount):
		return &mysql.MyError{Code: mysql.ER_WRONG_VALUE_COUNT_ON_ROW, State: "21S01", Message: err.Error()}
	case errors.Is(err, rewrite.ErrRollupOrder):
		return &mysql.MyError{Code: mysql.ER_WRONG_USAGE, State: "HY000", Message: "Incorrect usage of CUBE/ROLLUP and ORDER BY"}
	case errors.Is(err, rewrite.ErrShardKeyUpdate):
		return &sqlerr.Error{Code: sqlerr.ShardKeyUpdate, Msg: err.Error()}
	case errors.As(err, &ue):
		return &sqlerr.Error{Code: sqlerr.NotSupported, Msg: ue.Error()}
	case errors.Is(err, backend.ErrPoolTimeout):
		return &sqlerr.Error{Code: sqlerr.PoolTimeout, Msg: err.Error()}
	case errors.As(err, &bte):
		return &sqlerr.Error{Code: sqlerr.StatementTimeout, Msg: bte.Error()}
	case errors.As(err, &bke):
		return &sqlerr.Error{Code: sqlerr.QueryInterrupted, Msg: bke.Error()}
	case errors.As(err, &boe): // before bue: it wraps the failure that opened the breaker
		return &sqlerr.Error{Code: sqlerr.BackendUnavailable, Msg: boe.Error()}
	case errors.As(err, &bue):
		return &sqlerr.Error{Code: sqlerr.BackendUnavailable, Msg: bue.Error()}
	}
	return &sqlerr.Error{Code: sqlerr.Internal, Msg: err.Error()}
}

// connLost reports an error after which a backend connection was dropped
// with its state unknown: the datasource is unavailable, the connection
// broke, or the statement ran past the statement timeout.
func connLost(err error) bool {
	ce := classify(err)
	return sqlerr.Is(ce, sqlerr.BackendUnavailable) || sqlerr.Is(ce, sqlerr.StatementTimeout) || sqlerr.Is(ce, sqlerr.QueryInterrupted)
}

// backendFailure reports an error a datasource caused (or a connection to
// it), as opposed to a refusal of the engine's own (a transaction rule):
// it counts in the shard's error metrics.
func backendFailure(err error) bool {
	ce := classify(err)
	return !sqlerr.Is(ce, sqlerr.CrossShardTxn) && !sqlerr.Is(ce, sqlerr.TxnAborted) && !sqlerr.Is(ce, sqlerr.TxnRolledBack)
}
