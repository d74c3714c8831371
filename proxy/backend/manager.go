package backend

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/convoy-im/convoy/router"
)

// Manager owns one Pool per datasource and follows route-table changes. A
// watchdog goroutine fails the commands that run past their timeout; each
// pool runs a health checker (see Pool.check).
type Manager struct {
	opt         Options
	mu          sync.RWMutex
	pools       map[string]*Pool
	transitions *prometheus.CounterVec // datasource, to
	stop        chan struct{}
	done        chan struct{}
	closeOnce   sync.Once
}

// NewManager returns an empty manager; call Update with a snapshot, and
// Close when done.
func NewManager(opt Options) *Manager {
	m := &Manager{opt: opt.withDefaults(), pools: map[string]*Pool{}, stop: make(chan struct{}), done: make(chan struct{}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "convoy_datasource_transitions_total",
			Help: "Datasource state changes seen by the health checker, by the state entered (up|down|hung).",
		}, []string{"datasource", "to"})}
	go m.watchdog()
	return m
}

// watchdog interrupts commands past their connection's timeout, on every
// pool, until Close.
func (m *Manager) watchdog() {
	defer close(m.done)
	t := time.NewTicker(watchdogTick(m.opt.StatementTimeout))
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case now := <-t.C:
			m.mu.RLock()
			for _, p := range m.pools {
				p.expire(now)
			}
			m.mu.RUnlock()
		}
	}
}

func (m *Manager) transition(ds string, to State) {
	m.transitions.WithLabelValues(ds, to.String()).Inc()
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
		p, err := newPool(ds, m.opt, m.transition)
		if err != nil {
			return err
		}
		for _, s := range []State{StateUp, StateDown, StateHung} {
			m.transitions.WithLabelValues(ds.Name, s.String()) // exported at 0 from the start
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

func (m *Manager) pool(datasource string) (*Pool, error) {
	m.mu.RLock()
	p, ok := m.pools[datasource]
	m.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownDatasource, datasource)
	}
	return p, nil
}

// Acquire returns a connection to the named datasource; foundRows asks for
// one with CLIENT_FOUND_ROWS (for clients that set it).
func (m *Manager) Acquire(ctx context.Context, datasource string, foundRows bool) (*Conn, error) {
	p, err := m.pool(datasource)
	if err != nil {
		return nil, err
	}
	c, err := p.Acquire(ctx, foundRows)
	if err == nil {
		c.setOwner(ownerOf(ctx))
	}
	return c, err
}

// Probe checks the named datasource live within timeout (see Pool.Probe).
func (m *Manager) Probe(ctx context.Context, datasource string, timeout time.Duration) (time.Duration, error) {
	p, err := m.pool(datasource)
	if err != nil {
		return 0, err
	}
	return p.Probe(ctx, timeout)
}

// PoolStats is a point-in-time view of one pool and its datasource's health.
type PoolStats struct {
	Datasource  string
	InUse, Idle int
	Health      Health
	// TLS is the mode and how the last connection was secured, e.g.
	// "verify-ca: TLSv1.3 TLS_AES_128_GCM_SHA256" or "preferred: off".
	TLS string
}

// Stats lists every pool's usage, sorted by datasource.
func (m *Manager) Stats() []PoolStats {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]PoolStats, 0, len(m.pools))
	for name, p := range m.pools {
		u, i := p.Stats()
		out = append(out, PoolStats{Datasource: name, InUse: u, Idle: i, Health: p.Health(), TLS: p.tls.State()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Datasource < out[j].Datasource })
	return out
}

// Close closes every pool and stops the watchdog and the health checkers
// (a probe in flight is interrupted).
func (m *Manager) Close() {
	m.closeOnce.Do(func() {
		close(m.stop)
		<-m.done
	})
	m.mu.Lock()
	var closed []*Pool
	for name, p := range m.pools {
		p.Close()
		closed = append(closed, p)
		delete(m.pools, name)
	}
	m.mu.Unlock()
	for _, p := range closed {
		<-p.checkDone
	}
}
