package engine

import (
	"context"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/router"
)

// Backends hands out connections to datasources. proxy/backend satisfies it
// (through a one-line adapter); unit tests use a recording fake.
type Backends interface {
	// Acquire returns a connection to datasource; foundRows asks for one
	// opened with CLIENT_FOUND_ROWS, for a client that set it.
	Acquire(ctx context.Context, datasource string, foundRows bool) (Conn, error)
}

// Conn is one backend connection, owned by one session until Release.
type Conn interface {
	Datasource() string
	// Exec runs a text-protocol statement.
	Exec(sql string) (*mysql.Result, error)
	// ExecMulti runs statements of Convoy's own, separated by ';', in one
	// round trip; the server stops at the first that fails (its error is
	// returned with the results before it). Never for a client's text.
	ExecMulti(sql string) ([]*mysql.Result, error)
	// ExecPrepared runs sql as a server-side prepared statement and returns
	// binary-protocol rows.
	ExecPrepared(sql string, args []any) (*mysql.Result, error)
	// Describe prepares sql and returns its parameter count and the result
	// columns the server describes at PREPARE.
	Describe(sql string) (params int, columns []*mysql.Field, err error)
	UseDB(db string) error
	// SyncVars makes the connection's session variables equal want.
	SyncVars(want map[string]string) error
	Release()
}

// Routes returns the route snapshot in force. routecfg.Watcher satisfies it.
type Routes interface {
	Current() *router.Snapshot
}
