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
	if owner == 0 {
		return 0
	}
	m.mu.RLock()
	pools := make([]*Pool, 0, len(m.pools))
	for _, p := range m.pools {
		pools = append(pools, p)
	}
	m.mu.RUnlock()
	n := 0
	for _, p := range pools {
		p.mu.Lock()
		conns := make([]*Conn, 0, len(p.live))
		for c := range p.live {
			conns = append(conns, c)
		}
		p.mu.Unlock()
		for _, c := range conns {
			c.ownerMu.Lock()
			claimed := c.owner == owner && c.interrupt(c.w.busy.Load(), claimKilled)
			c.ownerMu.Unlock()
			if !claimed {
				continue
			}
			n++
			// The claimed connection is never used again, so its thread id
			// cannot belong to anyone else by the time this runs.
			go p.killThread(c.id)
		}
	}
	return n
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
