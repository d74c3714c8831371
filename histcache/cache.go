package histcache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Entry is one row of the conversation index (conv_msg without conv_id).
type Entry struct {
	Seq, MsgID, SenderUID uint64
	MsgType               uint8
	CreatedMs             int64
}

// NoUpperBound as Fill's hi says the MySQL read proved every committed seq
// above lo is in entries (e.g. "ORDER BY seq DESC LIMIT 500" from the top).
const NoUpperBound = math.MaxUint64

// MaxSeq is the largest seq the hot tier stores: ZSet scores are float64,
// exact up to 2^53. Conversations that reach it are simply never cached.
const MaxSeq = 1<<53 - 1

var (
	// ErrNotFillable is returned by BeginFill when a fill could not be
	// installed anyway (a write is pending, or Redis lost this conversation's
	// state less than MarkerTTL ago): skip the extra MySQL read.
	ErrNotFillable = errors.New("histcache: conversation not fillable now")
	// ErrBadFill is a caller bug: entries outside [lo, hi] or duplicate seqs.
	ErrBadFill = errors.New("histcache: [BUG] fill entries do not match the proved range")
	// ErrBreakerOpen is the error of a call that was not sent because the
	// circuit breaker is open (Redis failed BreakerFailures calls in a row):
	// the caller goes to MySQL as for any Redis error, without the wait.
	ErrBreakerOpen = errors.New("histcache: Redis bypassed (circuit breaker open)")
)

// Options are the hot tier's limits. Zero fields take the defaults.
type Options struct {
	MaxEntries int           // most recent entries kept per conversation (500)
	TTL        time.Duration // key TTL, refreshed by writes and fills (7 days)
	// MarkerTTL is how long a pending-write marker is trusted (5 s). A writer
	// must commit within MarkerTTL of calling BeginWrite; an older marker
	// means the writer died and the conversation is invalidated.
	MarkerTTL time.Duration
	// CoverageTTL is how long a full fill's proof is trusted (1 min). It
	// bounds the damage of a write whose marker could not be set and whose
	// fallback invalidation failed too. Negative disables the bound.
	CoverageTTL time.Duration
	Timeout     time.Duration // per Redis call (50 ms); the client needs ContextTimeoutEnabled
	// Hot conversations: HotReads reads within HotWindow make a conversation
	// hot; its pages then go through an in-process LRU of LRUSize pages kept
	// at most LRUTTL (50 per 1 s, 100 pages, 1 s). HotReads < 0 disables it.
	HotReads  int
	HotWindow time.Duration
	LRUSize   int
	LRUTTL    time.Duration
	// Circuit breaker (see breaker): BreakerFailures consecutive failed or
	// timed-out calls open it (5; negative: never) once the first of them
	// is BreakerMinOutage old (250 ms; negative: at once); a probe runs after
	// BreakerBackoff (200 ms), doubling after each failed probe up to
	// BreakerBackoffMax (1 s); after closing, reads wait settle() more.
	// Every proxy sharing the Redis should use the same BreakerBackoffMax.
	// MaxUnrepaired bounds the conversations remembered for invalidation
	// (10000); past it the whole tier is reset.
	BreakerFailures   int
	BreakerMinOutage  time.Duration
	BreakerBackoff    time.Duration
	BreakerBackoffMax time.Duration
	BreakerSettle     time.Duration // 0: settle(); negative: none (tests)
	MaxUnrepaired     int
	// Log gets one line at each opening and closing of the breaker (nil: none).
	Log *zap.Logger
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 500
	}
	def(&o.TTL, 7*24*time.Hour)
	def(&o.MarkerTTL, 5*time.Second)
	def(&o.CoverageTTL, time.Minute)
	if o.CoverageTTL < 0 {
		o.CoverageTTL = 100 * 365 * 24 * time.Hour
	}
	def(&o.Timeout, 50*time.Millisecond)
	if o.HotReads == 0 {
		o.HotReads = 50
	}
	def(&o.HotWindow, time.Second)
	if o.LRUSize == 0 {
		o.LRUSize = 100
	}
	def(&o.LRUTTL, time.Second)
	if o.BreakerFailures == 0 {
		o.BreakerFailures = 5
	}
	def(&o.BreakerMinOutage, 250*time.Millisecond)
	def(&o.BreakerBackoff, 200*time.Millisecond)
	def(&o.BreakerBackoffMax, time.Second)
	if o.MaxUnrepaired <= 0 {
		o.MaxUnrepaired = 10000
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	return o
}

// probeTimeout bounds the probe's PING. No client waits for it, so it is
// more patient than a call: a Redis that answers at all closes the breaker
// (and gets this proxy's repairs) soon after it is back.
func (o Options) probeTimeout() time.Duration { return max(o.Timeout, 250*time.Millisecond) }

// settle is how long reads stay off Redis after the breaker closes: one
// probe interval of the other proxies (BreakerBackoffMax), by which each of
// them that wrote without Redis during the same outage has probed, plus
// time for that probe and its repair.
func (o Options) settle() time.Duration {
	if o.BreakerSettle != 0 {
		return o.BreakerSettle
	}
	return o.BreakerBackoffMax + 2*o.probeTimeout()
}

// Cache is the Redis hot tier of conversation history. Safe for concurrent use.
type Cache struct {
	rdb redis.UniversalClient
	opt Options
	m   *metrics
	hot *hotSpots
	lru *pageLRU
	br  *breaker
	rep *unrepaired

	repairMu  sync.Mutex   // one repair at a time
	repairing atomic.Bool  // a background repair is running or queued
	lastKick  atomic.Int64 // unix ns of the last background repair started after a success

	ttlSec, markerMs, coverMs string
}

// New returns a Cache on rdb. reg may be nil. rdb should be built with
// ContextTimeoutEnabled so that Options.Timeout bounds a hung Redis, not
// only a dead one.
func New(rdb redis.UniversalClient, opt Options, reg prometheus.Registerer) *Cache {
	opt = opt.withDefaults()
	c := &Cache{
		rdb:      rdb,
		opt:      opt,
		m:        newMetrics(reg),
		hot:      newHotSpots(opt.HotWindow, opt.HotReads),
		lru:      newPageLRU(opt.LRUSize),
		rep:      newUnrepaired(opt.MaxUnrepaired, opt.MarkerTTL),
		ttlSec:   strconv.FormatInt(int64((opt.TTL+time.Second-1)/time.Second), 10),
		markerMs: strconv.FormatInt(opt.MarkerTTL.Milliseconds(), 10),
		coverMs:  strconv.FormatInt(opt.CoverageTTL.Milliseconds(), 10),
	}
	c.br = newBreaker(opt.BreakerFailures, opt.BreakerMinOutage, opt.BreakerBackoff, opt.BreakerBackoffMax, opt.settle(), c.probe, c.transitioned)
	c.br.unsent = dialFailed
	c.rep.gauge = c.m.unrepaired.Set
	c.rep.onAll = func() {
		c.opt.Log.Warn("hot tier owes a reset: more conversations written without Redis than it remembers, or a tier-wide invalidation failed; this proxy bypasses the tier until every cached conversation is invalidated",
			zap.Int("max_unrepaired", c.opt.MaxUnrepaired))
	}
	return c
}

// FillToken is the conversation's version seen by BeginFill.
type FillToken struct{ inc, ep string }

// WriteToken names one writer's pending-write marker. unmarked: BeginWrite
// failed or was skipped, so the write is noted as owed an invalidation.
type WriteToken struct {
	id       string
	unmarked bool
}

type keys struct{ meta, zset, maxseq string }

func keysOf(conv uint64) keys {
	tag := "{" + strconv.FormatUint(conv, 10) + "}"
	return keys{meta: "im:hist:meta:" + tag, zset: "im:hist:conv:" + tag, maxseq: "im:hist:maxseq:" + tag}
}

func randomID() string { return strconv.FormatUint(rand.Uint64(), 36) }

// run executes one script through the circuit breaker.
func (c *Cache) run(ctx context.Context, op string, s *redis.Script, keys []string, args ...any) (any, error) {
	if !c.br.allow() {
		return nil, fmt.Errorf("histcache %s: %w", op, ErrBreakerOpen)
	}
	v, err := c.exec(ctx, op, s, keys, args...)
	c.record(ctx, err)
	return v, err
}

// record tells the breaker how an allowed call went. A call the caller
// cancelled says nothing about Redis. A success is also the moment to
// retry a repair that failed earlier.
func (c *Cache) record(ctx context.Context, err error) {
	if err != nil && ctx.Err() != nil {
		return
	}
	c.br.done(err)
	if err == nil && c.rep.n.Load() != 0 {
		c.maybeKick()
	}
}

// gate says why a call about conv is not sent to Redis: the breaker is
// open (skipping the call starts the probe when it is due), a read just
// after it closed (settling), or this proxy owes conv an invalidation
// (which it then retries, at most every 100 ms).
func (c *Cache) gate(conv uint64, read bool) string {
	if !c.br.allow() {
		return "breaker_open"
	}
	if read && !c.br.serving() {
		return "settling"
	}
	if c.rep.has(conv) {
		c.maybeKick()
		return "unrepaired"
	}
	return ""
}

// gateErr is a gated read's error (for the log, like any read error).
func gateErr(why string) error {
	if why == "breaker_open" {
		return ErrBreakerOpen
	}
	return fmt.Errorf("histcache: not served from Redis: %s", why)
}

func (c *Cache) maybeKick() {
	if now := time.Now().UnixNano(); now-c.lastKick.Load() > int64(100*time.Millisecond) {
		c.lastKick.Store(now)
		c.kickRepair()
	}
}

// exec executes one script under the per-call timeout and records latency.
func (c *Cache) exec(ctx context.Context, op string, s *redis.Script, keys []string, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opt.Timeout)
	defer cancel()
	t0 := time.Now()
	v, err := s.Run(ctx, c.rdb, keys, args...).Result()
	c.m.latency.WithLabelValues(op).Observe(time.Since(t0).Seconds())
	if err != nil {
		c.m.fallbacks.WithLabelValues(op).Inc()
		return nil, fmt.Errorf("histcache %s: %w", op, err)
	}
	return v, nil
}

const (
	opBefore = 'b'
	opAfter  = 'a'
	opMsgID  = 'm'
)

var opNames = map[byte]string{opBefore: "before", opAfter: "after", opMsgID: "msgid"}

// Before returns the page of "seq < before ORDER BY seq DESC LIMIT limit".
// ok=false is a miss: the caller reads MySQL. err is for logging only; a
// read with an error is always a miss.
func (c *Cache) Before(ctx context.Context, convID, before uint64, limit int) ([]Entry, bool, error) {
	return c.page(ctx, opBefore, convID, before, limit)
}

// After returns the page of "seq > after ORDER BY seq ASC LIMIT limit".
// Same contract as Before.
func (c *Cache) After(ctx context.Context, convID, after uint64, limit int) ([]Entry, bool, error) {
	return c.page(ctx, opAfter, convID, after, limit)
}

// ByMsgID answers "WHERE conv_id=? AND msg_id=?". found=false with ok=true
// means the row certainly does not exist in the conversation (only provable
// when the cache covers the whole conversation); ok=false is a miss.
func (c *Cache) ByMsgID(ctx context.Context, convID, msgID uint64) (e Entry, found, ok bool, err error) {
	page, ok, err := c.read(ctx, opMsgID, convID, msgID, 1, false)
	if !ok || len(page) == 0 {
		return Entry{}, false, ok, err
	}
	return page[0], true, true, nil
}

func (c *Cache) page(ctx context.Context, op byte, conv, cursor uint64, limit int) ([]Entry, bool, error) {
	if limit <= 0 {
		c.m.misses.WithLabelValues(opNames[op], "bad_request").Inc()
		return nil, false, nil
	}
	if why := c.gate(conv, true); why != "" {
		c.m.misses.WithLabelValues(opNames[op], why).Inc()
		return nil, false, gateErr(why)
	}
	now := time.Now()
	if !c.hot.touch(conv, now) {
		return c.read(ctx, op, conv, cursor, limit, false)
	}
	k := lruKey{conv: conv, op: op, cursor: cursor, limit: limit}
	if e, ok := c.lru.get(k, now); ok {
		ver, err := c.version(ctx, conv)
		if err != nil {
			c.m.misses.WithLabelValues(opNames[op], errReason(err)).Inc()
			return nil, false, err
		}
		if ver == e.version {
			c.m.hits.WithLabelValues(opNames[op]).Inc()
			c.m.lruHits.Inc()
			return append([]Entry(nil), e.page...), true, nil
		}
		c.lru.remove(k)
	}
	return c.read(ctx, op, conv, cursor, limit, true)
}

// version is the LRU's check: one HMGET, much cheaper for Redis than the read script.
func (c *Cache) version(ctx context.Context, conv uint64) (string, error) {
	if !c.br.allow() {
		return "", fmt.Errorf("histcache version: %w", ErrBreakerOpen)
	}
	cctx, cancel := context.WithTimeout(ctx, c.opt.Timeout)
	defer cancel()
	t0 := time.Now()
	v, err := c.rdb.HMGet(cctx, keysOf(conv).meta, "inc", "ep").Result()
	c.m.latency.WithLabelValues("version").Observe(time.Since(t0).Seconds())
	c.record(ctx, err)
	if err != nil {
		c.m.fallbacks.WithLabelValues("version").Inc()
		return "", fmt.Errorf("histcache version: %w", err)
	}
	inc, _ := v[0].(string)
	ep, _ := v[1].(string)
	if inc == "" {
		return "", nil
	}
	return inc + ":" + ep, nil
}

func (c *Cache) read(ctx context.Context, op byte, conv, cursor uint64, limit int, remember bool) ([]Entry, bool, error) {
	name := opNames[op]
	if op == opMsgID { // Before/After: gated in page
		if why := c.gate(conv, true); why != "" {
			c.m.misses.WithLabelValues(name, why).Inc()
			return nil, false, gateErr(why)
		}
	}
	k := keysOf(conv)
	reply, err := c.run(ctx, name, readScript, []string{k.meta, k.zset},
		string(op), strconv.FormatUint(cursor, 10), limit, c.coverMs)
	if err != nil {
		c.m.misses.WithLabelValues(name, errReason(err)).Inc()
		return nil, false, err
	}
	r, _ := reply.([]any)
	status, _ := r[0].(string)
	if status != "hit" {
		reason, _ := r[1].(string)
		c.m.misses.WithLabelValues(name, reason).Inc()
		switch reason {
		case "stale_marker", "inconsistent":
			c.m.invalidations.WithLabelValues(reason).Inc()
		}
		return nil, false, nil
	}
	version, _ := r[1].(string)
	left, _ := r[2].(int64)
	raw, _ := r[3].([]any)
	page := make([]Entry, 0, len(raw)/2)
	for i := 0; i+1 < len(raw); i += 2 {
		m, _ := raw[i].(string)
		s, _ := raw[i+1].(string)
		e, err := decode(m, s)
		if err != nil {
			c.m.misses.WithLabelValues(name, "corrupt").Inc()
			return nil, false, err
		}
		page = append(page, e)
	}
	c.m.hits.WithLabelValues(name).Inc()
	if remember {
		ttl := min(c.opt.LRUTTL, time.Duration(left)*time.Millisecond)
		c.lru.put(&lruEntry{
			key:      lruKey{conv: conv, op: op, cursor: cursor, limit: limit},
			page:     append([]Entry(nil), page...),
			version:  version,
			deadline: time.Now().Add(ttl),
		})
	}
	return page, true, nil
}

// BeginFill starts a fill after a miss. Call it BEFORE reading MySQL; the
// token records the conversation's write epoch. ErrNotFillable (or any
// error) means: serve the client from MySQL and do not call Fill.
func (c *Cache) BeginFill(ctx context.Context, convID uint64) (FillToken, error) {
	if why := c.gate(convID, false); why != "" {
		c.m.fills.WithLabelValues(why).Inc()
		return FillToken{}, fmt.Errorf("%w: %s", ErrNotFillable, why)
	}
	k := keysOf(convID)
	reply, err := c.run(ctx, "begin_fill", beginFillScript, []string{k.meta}, randomID(), c.ttlSec, c.markerMs)
	if err != nil {
		c.m.fills.WithLabelValues(errResult(err)).Inc()
		return FillToken{}, err
	}
	r, _ := reply.([]any)
	inc, _ := r[0].(string)
	ep, _ := r[1].(string)
	if why, _ := r[2].(string); why != "" {
		c.m.fills.WithLabelValues("not_fillable").Inc()
		return FillToken{}, fmt.Errorf("%w: %s", ErrNotFillable, why)
	}
	return FillToken{inc: inc, ep: ep}, nil
}

// Fill installs what one MySQL read returned: entries are every committed
// row with lo <= seq <= hi (lo = 0: from the first message; hi =
// NoUpperBound: up to the newest). It is installed only if no write began,
// ended or was invalidated since BeginFill and none is pending. A range with
// hi = NoUpperBound replaces the cached range; a bounded one only extends an
// existing, adjacent coverage downwards. Fill reports whether it installed.
func (c *Cache) Fill(ctx context.Context, convID uint64, tok FillToken, entries []Entry, lo, hi uint64) (bool, error) {
	if tok.inc == "" {
		return false, nil
	}
	if why := c.gate(convID, false); why != "" {
		// unrepaired: an unmarked write of this proxy may have committed
		// after the MySQL read; the epoch would not show it.
		c.m.fills.WithLabelValues(why).Inc()
		return false, nil
	}
	maxSeq := ""
	var top uint64
	args := make([]any, 0, 9+2*len(entries))
	hiArg := "inf"
	if hi != NoUpperBound {
		hiArg = strconv.FormatUint(hi, 10)
	}
	args = append(args, tok.inc, tok.ep, strconv.FormatUint(lo, 10), hiArg, c.markerMs, c.coverMs,
		c.opt.MaxEntries, c.ttlSec, nil)
	seen := make(map[uint64]struct{}, len(entries))
	for _, e := range entries {
		if e.Seq < lo || e.Seq > hi {
			return false, fmt.Errorf("%w: seq %d outside [%d, %d]", ErrBadFill, e.Seq, lo, hi)
		}
		if _, dup := seen[e.Seq]; dup {
			return false, fmt.Errorf("%w: seq %d twice", ErrBadFill, e.Seq)
		}
		seen[e.Seq] = struct{}{}
		if e.Seq > MaxSeq {
			c.m.fills.WithLabelValues("unsupported").Inc()
			return false, nil
		}
		top = max(top, e.Seq)
		args = append(args, strconv.FormatUint(e.Seq, 10), encode(e))
	}
	if len(entries) > 0 {
		maxSeq = strconv.FormatUint(top, 10)
	}
	args[8] = maxSeq
	k := keysOf(convID)
	reply, err := c.run(ctx, "fill", fillScript, []string{k.meta, k.zset, k.maxseq}, args...)
	if err != nil {
		c.m.fills.WithLabelValues(errResult(err)).Inc()
		return false, err
	}
	res, _ := reply.(string)
	c.m.fills.WithLabelValues(res).Inc()
	return res == "installed", nil
}

// BeginWrite sets a pending-write marker. Call it BEFORE the statement that
// makes the write visible (the autocommit INSERT/UPDATE/DELETE, or the
// COMMIT of a transaction that wrote conv_msg rows of convID); the commit
// must complete within Options.MarkerTTL of this call. The token is usable
// even when err != nil: always finish with EndWrite or AbortWrite, which then
// invalidate the conversation because the marker is missing. Until that
// invalidation has reached Redis this proxy does not serve the
// conversation from the tier (see unrepaired).
func (c *Cache) BeginWrite(ctx context.Context, convID uint64) (WriteToken, error) {
	tok := WriteToken{id: randomID()}
	k := keysOf(convID)
	_, err := c.run(ctx, "begin_write", beginWriteScript, []string{k.meta}, tok.id, randomID(), c.markerMs, c.ttlSec)
	if err != nil {
		tok.unmarked = true
		c.rep.begin(convID)
	}
	return tok, err
}

// settleWrite notes what a finished write may owe Redis: an unmarked write
// always owes an invalidation; a marked one whose end failed owes one too
// (its marker covers other readers only if the commit kept to MarkerTTL).
func (c *Cache) settleWrite(convID uint64, tok WriteToken, err error) {
	switch {
	case tok.unmarked:
		c.rep.end(convID)
	case err != nil:
		c.rep.mark(convID)
	default:
		return
	}
	c.kickRepair()
}

// EndWrite is called AFTER the commit with the conv_msg rows it inserted
// (write-through): they are added to the cached range, the marker is
// released. If the marker is gone (it expired, or BeginWrite failed) the
// conversation is invalidated instead. If EndWrite itself fails, the marker
// stays until MarkerTTL and the next reader invalidates the conversation.
func (c *Cache) EndWrite(ctx context.Context, convID uint64, tok WriteToken, committed []Entry) error {
	inval, maxSeq := "0", ""
	args := make([]any, 0, 5+2*len(committed))
	args = append(args, tok.id, c.opt.MaxEntries, c.ttlSec, nil, nil)
	var top uint64
	for _, e := range committed {
		if e.Seq > MaxSeq {
			inval = "1"
			break
		}
		top = max(top, e.Seq)
		args = append(args, strconv.FormatUint(e.Seq, 10), encode(e))
	}
	if inval == "1" {
		args = args[:5]
	} else if len(committed) > 0 {
		maxSeq = strconv.FormatUint(top, 10)
	}
	args[3], args[4] = inval, maxSeq
	k := keysOf(convID)
	reply, err := c.run(ctx, "end_write", endWriteScript, []string{k.meta, k.zset, k.maxseq}, args...)
	c.lru.dropConv(convID)
	c.settleWrite(convID, tok, err)
	if err != nil {
		c.m.writes.WithLabelValues(errResult(err)).Inc()
		return err
	}
	res, _ := reply.(string)
	c.m.writes.WithLabelValues(res).Inc()
	if res == "lease_lost" || res == "invalidated" {
		c.m.invalidations.WithLabelValues(res).Inc()
	}
	return nil
}

// AbortWrite releases the marker without adding anything: after a rollback,
// and after Invalidate once an UPDATE/DELETE (recall) has committed. While
// the conversation is owed an invalidation (the Invalidate before it
// failed) the marker is kept: when it expires, readers drop the
// conversation, so no proxy serves the change's old rows meanwhile.
func (c *Cache) AbortWrite(ctx context.Context, convID uint64, tok WriteToken) error {
	c.lru.dropConv(convID)
	if !tok.unmarked && c.rep.has(convID) {
		return nil
	}
	_, err := c.run(ctx, "abort_write", abortWriteScript, []string{keysOf(convID).meta}, tok.id)
	if tok.unmarked {
		c.settleWrite(convID, tok, err)
	}
	return err
}

// Invalidate drops the conversation's cached range. Call it AFTER the commit
// of a recall, delete or update of conv_msg rows, while that write's marker
// is still held (BeginWrite -> commit -> Invalidate -> AbortWrite). If it
// fails, the conversation is owed an invalidation (see unrepaired).
func (c *Cache) Invalidate(ctx context.Context, convID uint64) error {
	k := keysOf(convID)
	_, err := c.run(ctx, "invalidate", invalidateScript, []string{k.meta, k.zset})
	c.lru.dropConv(convID)
	if err != nil {
		c.rep.mark(convID)
		c.kickRepair()
		return err
	}
	c.m.invalidations.WithLabelValues("explicit").Inc()
	return nil
}

// dialFailed: the call never had a connection, so nothing of it can reach
// Redis later (Redis is down, not slow).
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// errReason is the miss reason of a failed call.
func errReason(err error) string {
	if errors.Is(err, ErrBreakerOpen) {
		return "breaker_open"
	}
	return "redis_error"
}

// errResult is the fill / write-through result label of a failed call.
func errResult(err error) string {
	if errors.Is(err, ErrBreakerOpen) {
		return "breaker_open"
	}
	return "error"
}

// encode builds the ZSet member msg_id:sender_uid:msg_type:created_ms.
func encode(e Entry) string {
	b := make([]byte, 0, 64)
	b = strconv.AppendUint(b, e.MsgID, 10)
	b = append(b, ':')
	b = strconv.AppendUint(b, e.SenderUID, 10)
	b = append(b, ':')
	b = strconv.AppendUint(b, uint64(e.MsgType), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, e.CreatedMs, 10)
	return string(b)
}

func decode(member, score string) (Entry, error) {
	var e Entry
	var f [4]string
	n := 0
	start := 0
	for i := 0; i < len(member) && n < 3; i++ {
		if member[i] == ':' {
			f[n] = member[start:i]
			n++
			start = i + 1
		}
	}
	if n != 3 {
		return e, fmt.Errorf("histcache: bad member %q", member)
	}
	f[3] = member[start:]
	var err [5]error
	var typ uint64
	e.MsgID, err[0] = strconv.ParseUint(f[0], 10, 64)
	e.SenderUID, err[1] = strconv.ParseUint(f[1], 10, 64)
	typ, err[2] = strconv.ParseUint(f[2], 10, 8)
	e.MsgType = uint8(typ)
	e.CreatedMs, err[3] = strconv.ParseInt(f[3], 10, 64)
	if e.Seq, err[4] = strconv.ParseUint(score, 10, 64); err[4] != nil {
		// Redis prints integral scores as integers; accept any float form anyway.
		var fl float64
		if fl, err[4] = strconv.ParseFloat(score, 64); err[4] == nil {
			e.Seq = uint64(fl)
		}
	}
	if e := errors.Join(err[:]...); e != nil {
		return Entry{}, fmt.Errorf("histcache: bad member %q score %q: %w", member, score, e)
	}
	return e, nil
}

// InvalidateAll drops every cached conversation: after DDL such as TRUNCATE
// or DROP of conv_msg, or a write the proxy could not attribute to
// conversations. It scans the meta keys (every master on Redis Cluster), so
// it is O(cached conversations): an operator action, not a hot-path call.
// If it fails (or the breaker is open) this proxy bypasses the tier until a
// reset succeeds (see unrepaired).
func (c *Cache) InvalidateAll(ctx context.Context) error {
	if !c.br.allow() {
		c.rep.markAll()
		return fmt.Errorf("histcache invalidate_all: %w", ErrBreakerOpen)
	}
	err := c.invalidateAll(ctx, "explicit")
	c.record(ctx, err)
	if err != nil {
		c.rep.markAll()
		c.kickRepair()
	}
	return err
}
