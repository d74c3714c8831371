package histcache

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// repairBatch is how many invalidations one pipelined round trip carries.
const repairBatch = 256

// probe is the half-open breaker's test of Redis: a PING, then the repair
// of everything this proxy owes, so that the breaker closes only once no
// conversation it wrote without Redis can be served stale by it.
func (c *Cache) probe() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.opt.probeTimeout())
	err := c.rdb.Ping(ctx).Err()
	cancel()
	if err != nil {
		return fmt.Errorf("histcache probe: %w", err)
	}
	return c.repair(context.Background())
}

// kickRepair starts a background repair while the breaker is closed (when
// it is open the probe repairs). A failed repair counts as one failed call.
func (c *Cache) kickRepair() {
	if c.br.current() != stateClosed || !c.rep.pending() || !c.repairing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer c.repairing.Store(false)
		if c.br.allow() {
			c.br.done(c.repair(context.Background()))
		}
	}()
}

// repair invalidates what this proxy owes Redis: the whole tier, or the
// conversations noted in c.rep. Each invalidation starts after the commits
// it covers (they ended before it was noted), so a fill begun before it is
// rejected (epoch) and one begun after it reads those rows from MySQL.
func (c *Cache) repair(ctx context.Context) error {
	c.repairMu.Lock()
	defer c.repairMu.Unlock()
	for range 3 { // notes made meanwhile; whatever is left waits for the next kick
		all, convs, seq := c.rep.todo()
		if !all && len(convs) == 0 {
			return nil
		}
		if all {
			t0 := time.Now()
			if err := c.invalidateAll(ctx, "reset"); err != nil {
				return err
			}
			c.rep.repaired(true, nil, seq)
			c.m.resets.Inc()
			n, _ := c.rep.size()
			c.opt.Log.Info("hot tier reset: every cached conversation invalidated",
				zap.Duration("took", time.Since(t0)), zap.Int("unrepaired_left", n))
			continue
		}
		for len(convs) > 0 {
			b := convs[:min(len(convs), repairBatch)]
			convs = convs[len(b):]
			if err := c.invalidateBatch(ctx, b, "repair"); err != nil {
				return err
			}
			c.rep.repaired(false, b, seq)
		}
	}
	return nil
}

// invalidateBatch drops convs in one pipelined round trip.
func (c *Cache) invalidateBatch(ctx context.Context, convs []uint64, cause string) error {
	if len(convs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, max(c.opt.Timeout, time.Second))
	defer cancel()
	t0 := time.Now()
	defer func() { c.m.latency.WithLabelValues(cause).Observe(time.Since(t0).Seconds()) }()
	// EVALSHA in a pipeline has no NOSCRIPT fallback: load it first (a
	// restarted Redis has an empty script cache).
	if err := invalidateScript.Load(ctx, c.rdb).Err(); err != nil {
		c.m.fallbacks.WithLabelValues(cause).Inc()
		return fmt.Errorf("histcache %s: %w", cause, err)
	}
	pipe := c.rdb.Pipeline()
	for _, conv := range convs {
		k := keysOf(conv)
		invalidateScript.EvalSha(ctx, pipe, []string{k.meta, k.zset})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		c.m.fallbacks.WithLabelValues(cause).Inc()
		return fmt.Errorf("histcache %s: %w", cause, err)
	}
	for _, conv := range convs {
		c.lru.dropConv(conv)
	}
	c.m.invalidations.WithLabelValues(cause).Add(float64(len(convs)))
	return nil
}

// invalidateAll drops every conversation that has a meta key (a ZSet
// without meta is never served), scanning every master on Redis Cluster.
func (c *Cache) invalidateAll(ctx context.Context, cause string) error {
	scan := func(ctx context.Context, rdb redis.UniversalClient) error {
		var cursor uint64
		for {
			sctx, cancel := context.WithTimeout(ctx, max(c.opt.Timeout, time.Second))
			keys, next, err := rdb.Scan(sctx, cursor, "im:hist:meta:{*}", 1000).Result()
			cancel()
			if err != nil {
				c.m.fallbacks.WithLabelValues(cause).Inc()
				return fmt.Errorf("histcache %s: scan: %w", cause, err)
			}
			convs := make([]uint64, 0, len(keys))
			for _, key := range keys {
				open, close := strings.IndexByte(key, '{'), strings.IndexByte(key, '}')
				if open < 0 || close <= open {
					continue
				}
				if conv, err := strconv.ParseUint(key[open+1:close], 10, 64); err == nil {
					convs = append(convs, conv)
				}
			}
			for len(convs) > 0 {
				b := convs[:min(len(convs), repairBatch)]
				convs = convs[len(b):]
				if err := c.invalidateBatch(ctx, b, cause); err != nil {
					return err
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
	}
	return scan(ctx, c.rdb)
}

// transitioned publishes a change of the breaker's state: metrics always;
// a log line when Redis is given up on and when the tier serves again (the
// probes in between are debug lines).
func (c *Cache) transitioned(t transition) {
	c.m.breakerState.Set(float64(t.to))
	c.m.breakerTransitions.WithLabelValues(t.to.String()).Inc()
	log := c.opt.Log
	switch {
	case t.from == stateClosed && t.to == stateOpen:
		log.Warn("Redis unavailable: hot tier bypassed, history reads and writes go to MySQL only (circuit breaker open)",
			zap.Int("failures", t.failures), zap.Error(t.err), zap.Duration("probe_in", t.wait))
	case t.to == stateClosed:
		n, all := c.rep.size()
		log.Info("Redis available again: hot tier serving (circuit breaker closed)",
			zap.Duration("open_for", t.openFor), zap.Int("probes", t.probes),
			zap.Int("unrepaired_left", n), zap.Bool("reset_owed", all))
		c.kickRepair() // writes that were in flight while it probed
	case t.to == stateOpen:
		log.Debug("hot tier probe failed; circuit breaker stays open",
			zap.Int("probes", t.probes), zap.Error(t.err), zap.Duration("probe_in", t.wait))
	default:
		log.Debug("hot tier probing Redis (circuit breaker half-open)", zap.Int("probes", t.probes))
	}
}
