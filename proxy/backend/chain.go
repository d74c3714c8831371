package backend

import (
	"context"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// maxChain bounds the results of one CALL Convoy buffers: a procedure
// looping over a SELECT would otherwise grow the proxy's memory for as long
// as it runs.
const maxChain = 10000

// results reads the replies of a statement that may answer with several: a
// CALL sends each result set of its procedure flagged
// SERVER_MORE_RESULTS_EXISTS, the OUT parameters of a prepared CALL as one
// more flagged SERVER_PS_OUT_PARAMS, then its final OK. A server error ends
// the chain: it is returned with the results before it.
func (w *wire) results() ([]*mysql.Result, error) {
	var out []*mysql.Result
	for {
		r, err := w.result()
		if err != nil {
			return out, err
		}
		out = append(out, r)
		if r.Status&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
			return out, nil
		}
		if len(out) >= maxChain {
			w.failed = true // the rest is unread: the connection is closed
			return out, &mysql.MyError{Code: mysql.ER_TOO_BIG_SELECT, State: "42000",
				Message: fmt.Sprintf("the statement answered more than %d result sets; Convoy stopped reading", maxChain)}
		}
	}
}

// ExecAll runs a text statement that may answer with several results (a
// CALL, a compound statement) and returns them all; see wire.results. The
// stored code may have changed the connection's session (variables, an open
// transaction, temporary tables, locks) behind Convoy's back, so the
// connection is closed at Release instead of going back to the pool.
func (c *Conn) ExecAll(sql string) ([]*mysql.Result, error) {
	c.retire = true
	if err := c.w.startQuery(sql); err != nil {
		return nil, c.check(err)
	}
	rs, err := c.w.results()
	return rs, c.check(err)
}

// ExecPreparedAll is ExecAll for the binary protocol: sql runs as a
// server-side prepared statement with args (a prepared CALL, whose OUT
// parameters come back as a result set of their own).
func (c *Conn) ExecPreparedAll(sql string, args []any) ([]*mysql.Result, error) {
	c.retire = true
	st, err := c.stmt(sql)
	if err != nil {
		return nil, err
	}
	if _, err := c.w.startExecute(st, args); err != nil {
		return nil, c.check(err)
	}
	rs, err := c.w.results()
	return rs, c.check(err)
}

// single reports a result that announces more after it: only a CALL does
// (ExecAll reads those), so a CALL that reached Exec (an admin's
// `datasource=` directive) returns its first result and the connection,
// with the rest unread, is closed at Release.
func (c *Conn) single(r *mysql.Result) {
	if r != nil && r.Status&mysql.SERVER_MORE_RESULTS_EXISTS != 0 {
		c.retire = true
	}
}

// AcquireOnce opens a connection to the named datasource for one statement,
// without the capabilities in drop (CLIENT_MULTI_RESULTS,
// CLIENT_PS_MULTI_RESULTS): for a client that lacks them, so the server
// answers its CALL exactly as it would answer that client. It takes a pool
// slot like any connection and is closed at Release.
func (m *Manager) AcquireOnce(ctx context.Context, datasource string, foundRows bool, drop uint32) (*Conn, error) {
	p, err := m.pool(datasource)
	if err != nil {
		return nil, err
	}
	c, err := p.open(ctx, foundRows, drop&(mysql.CLIENT_MULTI_RESULTS|mysql.CLIENT_PS_MULTI_RESULTS))
	if err != nil {
		return nil, err
	}
	c.retire = true
	c.setOwner(ownerOf(ctx))
	return c, nil
}
