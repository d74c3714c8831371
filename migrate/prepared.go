package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// preparedConn runs the binlog apply's statements on its target
// connection as server-side prepared statements kept for the connection's
// life, and its transactions as plain BEGIN / COMMIT.
//
// Why: the apply repeats a handful of statements (the checkpoint move, an
// upsert per table and row count), and a parameterised statement through
// database/sql costs two round trips (prepare, execute) unless it is
// prepared once; a Tx re-prepares statements prepared on a Conn. From
// `ready` on, every write of a read ramp's share waits for one apply
// batch before its ACK (inproxy's applywait.go), so the batch's round
// trips are the ramped write's latency: a batch of one seq-allocating
// insert drops from ten round trips to six.
type preparedConn struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
	// broken: a ROLLBACK failed, so the connection may still hold an open
	// transaction that the next BEGIN would commit half done. Every later
	// call fails; the caller's Run ends and the connection is discarded.
	broken error
}

var _ queryer = (*preparedConn)(nil)

// maxPrepared bounds the statements kept per connection (upserts differ
// by their row count; a batch rarely writes more than a few shapes).
const maxPrepared = 64

func newPreparedConn(conn *sql.Conn) *preparedConn {
	return &preparedConn{conn: conn, stmts: map[string]*sql.Stmt{}}
}

// stmt returns query prepared on the connection: kept when there is room,
// else prepared for this call only (closed by the caller through done).
func (p *preparedConn) stmt(ctx context.Context, query string) (st *sql.Stmt, done func(), err error) {
	if p.broken != nil {
		return nil, nil, p.broken
	}
	if st := p.stmts[query]; st != nil {
		return st, func() {}, nil
	}
	st, err = p.conn.PrepareContext(ctx, query)
	if err != nil {
		return nil, nil, err
	}
	if len(p.stmts) >= maxPrepared {
		return st, func() { _ = st.Close() }, nil
	}
	p.stmts[query] = st
	return st, func() {}, nil
}

func (p *preparedConn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, done, err := p.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	defer done()
	return st.ExecContext(ctx, args...)
}

func (p *preparedConn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if len(p.stmts) >= maxPrepared && p.stmts[query] == nil {
		// Not kept: a statement closed before its rows are read would
		// end them.
		return p.conn.QueryContext(ctx, query, args...)
	}
	st, _, err := p.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

func (p *preparedConn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if p.broken != nil || len(p.stmts) >= maxPrepared && p.stmts[query] == nil {
		return p.conn.QueryRowContext(ctx, query, args...)
	}
	st, _, err := p.stmt(ctx, query)
	if err != nil {
		// Row carries no settable error: let the connection report it.
		return p.conn.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// rollbackWait bounds a ROLLBACK sent after the caller's context ended.
const rollbackWait = 5 * time.Second

// txn runs f in one transaction of the connection: committed if f
// returns nil, rolled back otherwise.
func (p *preparedConn) txn(ctx context.Context, f func(q queryer) error) error {
	if p.broken != nil {
		return p.broken
	}
	if _, err := p.conn.ExecContext(ctx, "BEGIN"); err != nil {
		return err
	}
	if err := f(p); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackWait)
		defer cancel()
		if _, rerr := p.conn.ExecContext(rctx, "ROLLBACK"); rerr != nil {
			p.broken = fmt.Errorf("migrate: the apply's target connection is unusable: ROLLBACK failed: %w", rerr)
			return errors.Join(err, p.broken)
		}
		return err
	}
	if _, err := p.conn.ExecContext(ctx, "COMMIT"); err != nil {
		// The outcome is unknown: nothing more is sent on this connection.
		p.broken = fmt.Errorf("migrate: the apply's target connection is unusable: COMMIT failed: %w", err)
		return p.broken
	}
	return nil
}

// close closes the kept statements (the connection is the caller's).
func (p *preparedConn) close() {
	for q, st := range p.stmts {
		_ = st.Close()
		delete(p.stmts, q)
	}
}
