package engine

import (
	"context"
	"time"

	"github.com/convoy-im/convoy/proxy/backend"
)

// managerBackends adapts *backend.Manager to Backends.
type managerBackends struct{ m *backend.Manager }

// FromManager returns the Backends view of a backend.Manager.
func FromManager(m *backend.Manager) Backends { return managerBackends{m} }

func (b managerBackends) Acquire(ctx context.Context, ds string, foundRows bool) (Conn, error) {
	c, err := b.m.Acquire(ctx, ds, foundRows)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// setTimeout bounds each command on c until Release, if its backend can
// (proxy/backend's connections can; the recording fake cannot).
func setTimeout(c Conn, d time.Duration) {
	if t, ok := c.(interface{ SetTimeout(time.Duration) }); ok {
		t.SetTimeout(d)
	}
}
