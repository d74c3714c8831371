package planbuilder

import (
	"errors"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// Classify turns the errors of parsing, analysis and key conversion into
// what the client gets; ok is false for any other error. A MySQL error
// packet and an *sqlerr.Error are returned unchanged.
func Classify(err error) (_ error, ok bool) {
	var (
		me *mysql.MyError
		ee *sqlerr.Error
		se *rewrite.SyntaxError
		ke *router.KeyError
		ue *rewrite.UnsupportedError
	)
	switch {
	case errors.As(err, &me):
		return me, true
	case errors.As(err, &ee):
		return ee, true
	case errors.As(err, &se):
		if se.Code != 0 && se.Code != mysql.ER_PARSE_ERROR && se.Code < 2000 && se.State != "" {
			// The parser's own errno for what it refuses (1083 a field
			// separator, 1115 an unknown character set), as MariaDB's;
			// TiDB's own errnos (8000 and up) stay 1064.
			return &mysql.MyError{Code: se.Code, State: se.State, Message: se.Msg}, true
		}
		return &sqlerr.Error{Code: sqlerr.Syntax, Msg: se.Msg}, true
	case errors.As(err, &ke):
		return &sqlerr.Error{Code: sqlerr.BadShardKey, Msg: ke.Error()}, true
	case errors.Is(err, rewrite.ErrColumnCount):
		return &mysql.MyError{Code: mysql.ER_WRONG_VALUE_COUNT_ON_ROW, State: "21S01", Message: err.Error()}, true
	case errors.Is(err, rewrite.ErrRollupOrder):
		return &mysql.MyError{Code: mysql.ER_WRONG_USAGE, State: "HY000", Message: "Incorrect usage of CUBE/ROLLUP and ORDER BY"}, true
	case errors.Is(err, rewrite.ErrShardKeyUpdate):
		return &sqlerr.Error{Code: sqlerr.ShardKeyUpdate, Msg: err.Error()}, true
	case errors.As(err, &ue):
		return &sqlerr.Error{Code: sqlerr.NotSupported, Msg: ue.Error()}, true
	}
	return err, false
}

// classify is Classify for planning, where every error is the client's.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if ce, ok := Classify(err); ok {
		return ce
	}
	return &sqlerr.Error{Code: sqlerr.Internal, Msg: err.Error()}
}
