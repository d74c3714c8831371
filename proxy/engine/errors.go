package engine

import (
	"errors"

	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/proxy/planbuilder"
	"github.com/convoy-im/convoy/proxy/sqlerr"
)

// classify turns errors from the layers below into engine errors. A MySQL
// error packet from a backend is returned unchanged: the client sees the
// server's own errno and SQLSTATE.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if ce, ok := planbuilder.Classify(err); ok {
		return ce
	}
	var (
		bue *backend.UnavailableError
		boe *backend.OutageError
		bte *backend.TimeoutError
		bke *backend.KilledError
	)
	switch {
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
