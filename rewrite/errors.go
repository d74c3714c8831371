package rewrite

import (
	"errors"
	"fmt"
)

// The error vocabulary of the package. Every refusal is an *UnsupportedError
// (map it to one MySQL errno in the proxy); two families also wrap a sentinel
// so callers can tell them apart with errors.Is:
//
//	ErrMixedTables     a sharded table together with an unsharded table, or
//	                   sharded tables of different shard keys (conv_id vs uid)
//	ErrShardKeyUpdate  an UPDATE or ON DUPLICATE KEY UPDATE assigning the shard key
//	ErrColumnCount     an INSERT row with another number of values than columns
//	                   (MariaDB's 1136, which the client gets)
//
// Other *UnsupportedError values (Err == nil) cover INSERT shapes the router
// cannot split: no column list, key column missing, INSERT ... SELECT, a row
// whose key is not a literal or ?.
var (
	ErrMixedTables    = errors.New("statement mixes tables that live in different places")
	ErrShardKeyUpdate = errors.New("the shard key column cannot be updated")
	ErrColumnCount    = errors.New("column count doesn't match value count")
	// ErrRollupOrder: ORDER BY with GROUP BY ... WITH ROLLUP (MariaDB's 1221).
	ErrRollupOrder = errors.New("Incorrect usage of CUBE/ROLLUP and ORDER BY")
)

// UnsupportedError is a statement the proxy refuses to route. Msg is meant
// for the client and already names the offending table or row.
type UnsupportedError struct {
	Msg string
	Err error // ErrMixedTables, ErrShardKeyUpdate, or nil
}

func (e *UnsupportedError) Error() string { return e.Msg }

// Unwrap lets errors.Is(err, ErrMixedTables) work.
func (e *UnsupportedError) Unwrap() error { return e.Err }

func unsupported(format string, args ...any) error {
	return &UnsupportedError{Msg: fmt.Sprintf(format, args...)}
}

func unsupportedAs(sentinel error, format string, args ...any) error {
	return &UnsupportedError{Msg: fmt.Sprintf(format, args...), Err: sentinel}
}
