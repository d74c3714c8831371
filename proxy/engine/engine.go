// Package engine turns one client statement into work on the shards:
// parse -> analyse -> route -> execute -> merge. It holds no sockets: the
// proxy package feeds it statements and writes its results, and the backends
// arrive through the small Backends interface declared here.
package engine

import (
	"context"

	"go.uber.org/zap"
)

// Options bound what one statement may do. Zero values take the defaults.
type Options struct {
	// MaxInList caps the values of one shard-key IN list; a longer list gets
	// a clear error instead of an unbounded fan-out plan. Default 100000.
	MaxInList int
	// DDLParallelism bounds concurrent physical DDL statements. DDL on 1024
	// tables serially takes minutes; unbounded it would exhaust the pools.
	DDLParallelism int
}

func (o Options) withDefaults() Options {
	if o.MaxInList <= 0 {
		o.MaxInList = 100000
	}
	if o.DDLParallelism <= 0 {
		o.DDLParallelism = 8
	}
	return o
}

// Engine is shared by every session. It is safe for concurrent use.
type Engine struct {
	backends Backends
	routes   Routes
	metrics  *Metrics
	log      *zap.Logger
	opt      Options
}

// New builds an engine. metrics may be nil (no metrics are recorded).
func New(b Backends, r Routes, m *Metrics, log *zap.Logger, opt Options) *Engine {
	if log == nil {
		log = zap.NewNop()
	}
	return &Engine{backends: b, routes: r, metrics: m, log: log, opt: opt.withDefaults()}
}

// acquire gets a backend connection. Waiting is bounded by the pool's own
// wait timeout and running by the backend read timeout, so no per-statement
// context timer is needed on the hot path.
func (e *Engine) acquire(ds string) (Conn, error) {
	return e.backends.Acquire(context.Background(), ds)
}
