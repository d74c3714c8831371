package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/proxy/engine"
	"github.com/convoy-im/convoy/proxy/shardgate"
	"github.com/convoy-im/convoy/routecfg"
)

// shardHolder gives coord's LockFollower the engine's holds and write
// fences (coord.ShardHolder; the engine does not import coord). It
// also keeps the start-up fence: while this proxy is not registered in
// etcd, or its lock follower is not running, every sharded write is
// refused (see migrationLock).
type shardHolder struct {
	e  *engine.Engine
	mu sync.Mutex
	// startup is the start-up fence while it is up; adopted are the holds
	// a follower whose Start failed left (failed): the next follower takes
	// them over (else it could never hold those shards again).
	startup *shardgate.WriteFence
	adopted map[int]*shardgate.ShardHold
	// given are the holds handed to the follower and not released yet.
	given map[int]*givenHold
}

// givenHold is a hold the follower owns.
type givenHold struct {
	*shardgate.ShardHold
	h     *shardHolder
	shard int
}

func (g *givenHold) Release() {
	g.h.mu.Lock()
	if g.h.given[g.shard] == g {
		delete(g.h.given, g.shard)
	}
	g.h.mu.Unlock()
	g.ShardHold.Release()
}

func (h *shardHolder) Hold(ctx context.Context, shard int) (coord.ShardHold, error) {
	h.mu.Lock()
	f, adopted := h.adopted[shard]
	delete(h.adopted, shard)
	h.mu.Unlock()
	if !adopted {
		var err error
		if f, err = h.e.Hold(ctx, shard); err != nil {
			return nil, err
		}
	}
	// An adopted hold is taken over: its writes stay refused (not queued)
	// until the follower releases it.
	g := &givenHold{ShardHold: f, h: h, shard: shard}
	h.mu.Lock()
	if h.given == nil {
		h.given = map[int]*givenHold{}
	}
	h.given[shard] = g
	h.mu.Unlock()
	return g, nil
}

// Fence is the engine's write fence.
func (h *shardHolder) Fence(ctx context.Context, err error) coord.WriteFence {
	f, _ := h.e.Fence(ctx, err)
	return f
}

// fenceAll refuses every sharded write with err until liftFence, and
// adopts the holds a failed follower left. It runs before the proxy
// accepts clients, or after a follower failed to start, so no write is
// running to wait for.
func (h *shardHolder) fenceAll(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.adopted == nil {
		h.adopted = map[int]*shardgate.ShardHold{}
	}
	for sh, g := range h.given {
		g.Fail(err) // a no-op if the follower failed it already
		h.adopted[sh] = g.ShardHold
	}
	h.given = nil
	if h.startup == nil {
		h.startup, _ = h.e.Fence(context.Background(), err)
	}
}

func (h *shardHolder) liftFence() {
	h.mu.Lock()
	f, adopted := h.startup, h.adopted
	h.startup, h.adopted = nil, nil
	h.mu.Unlock()
	for _, hold := range adopted {
		hold.Release()
	}
	if f != nil {
		f.Lift()
	}
}

// errUnregistered is what writes get while the proxy is not registered.
var errUnregistered = fmt.Errorf("%w: this proxy is not registered in etcd, or not following its migration locks, yet: a migration could switch a shard without it, so writes are refused until it does (reads are served)", coord.ErrShardUnavailable)

// migrationLock is the proxy's share of the migration lock protocol
// (coord/doc.go, "Migration lock"): the registration migrators count,
// and the LockFollower that holds shards for them through the engine.
//
// Order: the route watcher runs first (the registration records the route
// version served, the follower releases against it), then Register, then
// LockFollower.Start, which holds every shard locked now, and only then
// does the proxy accept clients. A proxy that cannot register (etcd
// unreachable at start) is invisible to migrators, and doc.go's rule is
// that it must not serve writes then: every shard's writes are refused
// with a clear error and reads are served, while registration and the
// follower are retried in the background; the fence lifts once both
// succeed. Once registered, the follower refuses every sharded write while
// the registration may have expired (etcd unanswered for about its TTL).
type migrationLock struct {
	cli     *clientv3.Client
	cluster string
	info    coord.ProxyInfo
	ttl     time.Duration
	routes  *routecfg.Watcher
	holder  *shardHolder
	metrics *coord.LockMetrics
	log     *zap.Logger
	// registered is called once with the registration.
	registered func(*coord.Registration)

	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex // guards reg and follower
	reg      *coord.Registration
	follower *coord.LockFollower
}

// start registers and starts the follower, or fences writes and keeps
// trying in the background.
func (m *migrationLock) start(ctx context.Context) error {
	ctx, m.cancel = context.WithCancel(ctx)
	m.done = make(chan struct{})
	err := m.try(ctx)
	if err == nil {
		close(m.done)
		return nil
	}
	m.log.Warn("cannot take part in migration locks yet (etcd registration or lock follower); refusing writes until it can, serving reads",
		zap.Error(err))
	m.holder.fenceAll(errUnregistered)
	go m.retry(ctx)
	return nil
}

func (m *migrationLock) retry(ctx context.Context) {
	defer close(m.done)
	backoff := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		err := m.try(ctx)
		if err == nil {
			m.holder.liftFence()
			m.log.Info("registered and following migration locks; writes accepted", zap.Int("attempts", attempt))
			return
		}
		m.holder.fenceAll(errUnregistered)
		if attempt%10 == 0 {
			m.log.Warn("still cannot take part in migration locks; writes stay refused", zap.Int("attempts", attempt), zap.Error(err))
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (m *migrationLock) try(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reg == nil {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		m.info.RouteVersion = m.routes.Current().Version()
		reg, err := coord.Register(rctx, m.cli, m.cluster, m.info, coord.WithTTL(m.ttl),
			coord.WithRegistryLogger(m.log.Named("registry")))
		cancel()
		if err != nil {
			return fmt.Errorf("registering: %w", err)
		}
		m.reg = reg
		m.registered(reg)
	}
	f := coord.NewLockFollower(m.cli, m.cluster, m.reg, m.routes, m.holder,
		coord.WithFollowerLogger(m.log.Named("miglock")), coord.WithFollowerMetrics(m.metrics))
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := f.Start(sctx)
	cancel()
	if err != nil {
		f.Close()
		return fmt.Errorf("starting the lock follower: %w", err)
	}
	m.follower = f
	return nil
}

// Close stops retrying, then the follower (held shards' writes fail: the
// proxy is going away), then revokes the registration.
func (m *migrationLock) Close() {
	if m.cancel == nil {
		return
	}
	m.cancel()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.follower != nil {
		m.follower.Close()
	}
	if m.reg != nil {
		if err := m.reg.Close(); err != nil && !errors.Is(err, context.Canceled) {
			m.log.Warn("revoking the registration", zap.Error(err))
		}
	}
}
