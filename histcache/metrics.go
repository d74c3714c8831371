package histcache

import "github.com/prometheus/client_golang/prometheus"

// metrics are always allocated so the hot path never checks for nil; they
// are only registered when New is given a Registerer.
type metrics struct {
	hits          *prometheus.CounterVec   // op
	lruHits       prometheus.Counter       //
	misses        *prometheus.CounterVec   // op, reason
	fills         *prometheus.CounterVec   // result
	writes        *prometheus.CounterVec   // result of EndWrite
	invalidations *prometheus.CounterVec   // cause
	fallbacks     *prometheus.CounterVec   // op: a Redis call failed, the caller goes to MySQL
	latency       *prometheus.HistogramVec // op

	breakerState       prometheus.Gauge       // 0 closed, 1 half-open, 2 open
	breakerTransitions *prometheus.CounterVec // to
	unrepaired         prometheus.Gauge       // conversations owed an invalidation
	resets             prometheus.Counter     // tier-wide resets after the bound was passed
}

func newMetrics(reg prometheus.Registerer) *metrics {
	const ns, sub = "convoy", "histcache"
	m := &metrics{
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "hits_total", Help: "History reads served from the hot tier (Redis or the in-process LRU)."}, []string{"op"}),
		lruHits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "lru_hits_total", Help: "Hits served from the in-process LRU of hot conversations (after an epoch check)."}),
		misses: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "misses_total", Help: "History reads the hot tier could not prove complete, by reason (breaker_open, settling and unrepaired: not asked of Redis)."}, []string{"op", "reason"}),
		fills: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "fills_total", Help: "Fill attempts by result (installed, rejected_stale, rejected_pending, rejected_young, unanchored, redundant, not_fillable, unrepaired, breaker_open, error)."}, []string{"result"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "write_through_total", Help: "EndWrite results (applied, lease_lost, state_lost, invalidated, breaker_open, error)."}, []string{"result"}),
		invalidations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "invalidations_total", Help: "Conversations whose cached range was dropped, by cause."}, []string{"cause"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "fallbacks_total", Help: "Redis calls that failed or timed out (reads fall back to MySQL), by operation."}, []string{"op"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "redis_seconds", Help: "Latency of hot-tier Redis calls, by operation.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1}}, []string{"op"}),
		breakerState: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "breaker_state", Help: "Circuit breaker in front of Redis: 0 closed (tier in use), 1 half-open (probing), 2 open (tier bypassed)."}),
		breakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "breaker_transitions_total", Help: "Circuit breaker state changes, by the state entered (open, half_open, closed)."}, []string{"to"}),
		unrepaired: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "unrepaired_conversations", Help: "Conversations written without Redis (breaker open, call failed) whose invalidation has not reached Redis yet; this proxy does not serve them from the tier."}),
		resets: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "resets_total", Help: "Tier-wide invalidations owed because more conversations were written without Redis than remembered, or an invalidation of the whole tier failed."}),
	}
	if reg != nil {
		reg.MustRegister(m.hits, m.lruHits, m.misses, m.fills, m.writes, m.invalidations, m.fallbacks, m.latency,
			m.breakerState, m.breakerTransitions, m.unrepaired, m.resets)
	}
	return m
}
