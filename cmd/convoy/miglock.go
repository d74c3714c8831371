package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/proxy/engine"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

// shardHolder gives routecfg's LockFollower the engine's holds
// (routecfg.ShardHolder; the engine does not import routecfg). It also
// keeps the start-up fence: while this proxy is not registered in etcd,
// or its lock follower is not running, every shard's writes are refused
// (see migrationLock).
type shardHolder struct {
	e     *engine.Engine
	mu    sync.Mutex
	fence map[int]*engine.ShardHold
	// given are the holds handed to the follower and not released yet: a
	// follower whose Start failed leaves them failed, and the fence adopts
	// them (else the next follower could never hold those shards).
	given map[int]*givenHold
}

// givenHold is a hold the follower owns.
type givenHold struct {
	*engine.ShardHold
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

func (h *shardHolder) Hold(ctx context.Context, shard int) (routecfg.ShardHold, error) {
	h.mu.Lock()
	f, fenced := h.fence[shard]
	delete(h.fence, shard)
	h.mu.Unlock()
	if !fenced {
		var err error
		if f, err = h.e.Hold(ctx, shard); err != nil {
			return nil, err
		}
	}
	// A fenced shard is taken over: its writes stay refused (not queued)
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

// fenceAll refuses every shard's writes with err until liftFence, taking
// over the holds a failed follower left. It runs before the proxy accepts
// clients, or after a follower failed to start, so no write is running to
// wait for.
func (h *shardHolder) fenceAll(err error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fence == nil {
		h.fence = make(map[int]*engine.ShardHold, router.NumShards)
	}
	for sh, g := range h.given {
		g.Fail(err) // a no-op if the follower failed it already
		h.fence[sh] = g.ShardHold
	}
	h.given = nil
	for sh := 0; sh < router.NumShards; sh++ {
		if h.fence[sh] != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		hold, herr := h.e.Hold(ctx, sh)
		cancel()
		if herr != nil {
			return herr
		}
		hold.Fail(err)
		h.fence[sh] = hold
	}
	return nil
}

func (h *shardHolder) liftFence() {
	h.mu.Lock()
	f := h.fence
	h.fence = nil
	h.mu.Unlock()
	for _, hold := range f {
		hold.Release()
	}
}

// errUnregistered is what writes get while the proxy is not registered.
var errUnregistered = fmt.Errorf("%w: this proxy is not registered in etcd, or not following its migration locks, yet: a migration could switch a shard without it, so writes are refused until it does (reads are served)", routecfg.ErrShardUnavailable)

// migrationLock is the proxy's share of the migration lock protocol
// (routecfg/doc.go, "Migration lock"): the registration migrators count,
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
// succeed. Once registered, etcd going away no longer touches the shards
// without a migration job (the follower fences only those with one).
type migrationLock struct {
	cli     *clientv3.Client
	cluster string
	info    routecfg.ProxyInfo
	ttl     time.Duration
	routes  *routecfg.Watcher
	holder  *shardHolder
	metrics *routecfg.LockMetrics
	log     *zap.Logger
	// registered is called once with the registration.
	registered func(*routecfg.Registration)

	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex // guards reg and follower
	reg      *routecfg.Registration
	follower *routecfg.LockFollower
}

// start registers and starts the follower, or fences writes and keeps
// trying in the background. It returns an error only when the fence
// itself cannot be put up.
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
	if err := m.holder.fenceAll(errUnregistered); err != nil {
		m.cancel()
		close(m.done)
		return err
	}
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
		if ferr := m.holder.fenceAll(errUnregistered); ferr != nil {
			m.log.Error("cannot fence the holds a failed lock follower left", zap.Error(ferr))
		}
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
		reg, err := routecfg.Register(rctx, m.cli, m.cluster, m.info, routecfg.WithTTL(m.ttl),
			routecfg.WithRegistryLogger(m.log.Named("registry")))
		cancel()
		if err != nil {
			return fmt.Errorf("registering: %w", err)
		}
		m.reg = reg
		m.registered(reg)
	}
	f := routecfg.NewLockFollower(m.cli, m.cluster, m.reg, m.routes, m.holder,
		routecfg.WithFollowerLogger(m.log.Named("miglock")), routecfg.WithFollowerMetrics(m.metrics))
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
