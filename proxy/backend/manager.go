package backend

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/convoy-im/convoy/router"
)

// Manager owns one Pool per datasource and follows route-table changes.
type Manager struct {
	opt   Options
	mu    sync.RWMutex
	pools map[string]*Pool
}

// NewManager returns an empty manager; call Update with a snapshot.
func NewManager(opt Options) *Manager {
	return &Manager{opt: opt.withDefaults(), pools: map[string]*Pool{}}
}

// Update creates pools for new datasources, replaces pools whose address or
// credentials changed, and closes pools of datasources that disappeared.
func (m *Manager) Update(snap *router.Snapshot) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	for _, ds := range snap.Datasources() {
		seen[ds.Name] = true
		if old, ok := m.pools[ds.Name]; ok && old.ds == ds {
			continue
		}
		p, err := newPool(ds, m.opt)
		if err != nil {
			return err
		}
		if old, ok := m.pools[ds.Name]; ok {
			old.Close()
		}
		m.pools[ds.Name] = p
	}
	for name, p := range m.pools {
		if !seen[name] {
			p.Close()
			delete(m.pools, name)
		}
	}
	return nil
}

// Acquire returns a connection to the named datasource; foundRows asks for
// one with CLIENT_FOUND_ROWS (for clients that set it).
func (m *Manager) Acquire(ctx context.Context, datasource string, foundRows bool) (*Conn, error) {
	m.mu.RLock()
	p, ok := m.pools[datasource]
	m.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownDatasource, datasource)
	}
	return p.Acquire(ctx, foundRows)
}

// PoolStats is a point-in-time view of one pool.
type PoolStats struct {
	Datasource  string
	InUse, Idle int
}

// Stats lists every pool's usage, sorted by datasource.
func (m *Manager) Stats() []PoolStats {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]PoolStats, 0, len(m.pools))
	for name, p := range m.pools {
		u, i := p.Stats()
		out = append(out, PoolStats{Datasource: name, InUse: u, Idle: i})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Datasource < out[j].Datasource })
	return out
}

// Close closes every pool.
func (m *Manager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, p := range m.pools {
		p.Close()
		delete(m.pools, name)
	}
}
