package backend

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// KILL QUERY through Convoy names a client connection (Convoy's own
// CONNECTION_ID()), never a backend thread: the thread ids of pooled
// connections are Convoy's business, and a client's id sent on as it is
// would stop whatever unrelated session's statement the datasource gives
// that number. A connection therefore carries the client connection that
// holds it (its owner, from the context of Acquire), and Interrupt stops
// the commands an owner has running.

type ownerKey struct{}

// WithOwner makes the connections acquired with ctx belong to client
// connection id (0: none), for Interrupt.
func WithOwner(ctx context.Context, id uint32) context.Context {
	return context.WithValue(ctx, ownerKey{}, id)
}

func ownerOf(ctx context.Context) uint32 {
	id, _ := ctx.Value(ownerKey{}).(uint32)
	return id
}

// setOwner records who holds c. Under c.ownerMu, so that Interrupt never
// claims a command of a connection that changed hands meanwhile.
func (c *Conn) setOwner(id uint32) {
	c.ownerMu.Lock()
	c.owner = id
	c.ownerMu.Unlock()
}

// KilledError is a statement stopped by KILL QUERY / KILL CONNECTION of
// its client connection. The backend connection was dropped (and its
// server thread killed), so what was open on it is rolled back.
type KilledError struct{ Datasource string }

func (e *KilledError) Error() string {
	return fmt.Sprintf("Query execution was interrupted (KILL): the statement on datasource %s was stopped; if it was a write its outcome is unknown", e.Datasource)
}

// killTimeout bounds the KILL QUERY sent to a datasource for an
// interrupted command's server thread.
const killTimeout = 3 * time.Second

// Interrupt stops every command the client connection owner has running on
// a backend: each is claimed (it fails at once with a KilledError and its
// connection is dropped, never pooled again) and its server thread gets
// KILL QUERY on another connection of the same datasource, so that the
// server stops working on it too. It returns how many it stopped.
func (m *Manager) Interrupt(owner uint32) int {
	return m.eachOwned(owner, func(c *Conn) bool {
		return c.interrupt(c.w.busy.Load(), claimKilled)
	}, func(pc poolConn) {
		// The claimed connection is never used again, so its thread id
		// cannot belong to anyone else by the time this runs.
		go pc.p.killThread(pc.c.id)
	})
}

// eachOwned calls stop, under the connection's owner lock, for each live
// connection owner holds; where stop stopped a statement, after runs
// (outside the lock). It returns how many stop stopped.
func (m *Manager) eachOwned(owner uint32, stop func(*Conn) bool, after func(poolConn)) int {
	if owner == 0 {
		return 0
	}
	n := 0
	for _, pc := range m.liveConns() {
		pc.c.ownerMu.Lock()
		stopped := pc.c.owner == owner && stop(pc.c)
		pc.c.ownerMu.Unlock()
		if stopped {
			n++
			after(pc)
		}
	}
	return n
}

// poolConn is a live backend connection and its pool.
type poolConn struct {
	p *Pool
	c *Conn
}

// liveConns lists every live backend connection of every pool.
func (m *Manager) liveConns() []poolConn {
	m.mu.RLock()
	pools := make([]*Pool, 0, len(m.pools))
	for _, p := range m.pools {
		pools = append(pools, p)
	}
	m.mu.RUnlock()
	var out []poolConn
	for _, p := range pools {
		p.mu.Lock()
		for c := range p.live {
			out = append(out, poolConn{p, c})
		}
		p.mu.Unlock()
	}
	return out
}

// InterruptQuery is KILL QUERY of client connection owner: the server
// stops each statement the owner has running on a backend (it fails with
// 1317, ER_QUERY_INTERRUPTED) and the connection stays, with its
// transaction open, as MariaDB leaves a session's. Until the KILL QUERY
// sent for it has been answered, the connection starts no other command
// (wire.killing), so the KILL cannot land on a later statement, whoever
// runs it. It returns how many statements it interrupted.
func (m *Manager) InterruptQuery(owner uint32) int {
	return m.eachOwned(owner, func(c *Conn) bool {
		if c.w.busy.Load() <= 0 {
			return false // between commands: nothing to stop
		}
		ch := make(chan struct{})
		return c.w.killing.CompareAndSwap(nil, &ch)
	}, func(pc poolConn) {
		ch := pc.c.w.killing.Load()
		go func() {
			pc.p.killThread(pc.c.id)
			pc.c.w.killing.Store(nil)
			close(*ch)
		}()
	})
}

// killThread sends KILL QUERY id on a connection of p (errors are not the
// client's: its statement has already failed).
func (p *Pool) killThread(id uint32) {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	c, err := p.Acquire(ctx, false)
	if err != nil {
		p.log.Debug("KILL QUERY of an interrupted command: no connection")
		return
	}
	c.SetTimeout(killTimeout)
	_, _ = c.Exec("KILL QUERY " + strconv.FormatUint(uint64(id), 10))
	c.Release()
}
