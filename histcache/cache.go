package histcache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
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
	return o
}

// Cache is the Redis hot tier of conversation history. Safe for concurrent use.
type Cache struct {
	rdb redis.UniversalClient
	opt Options
	m   *metrics
	hot *hotSpots
	lru *pageLRU

	ttlSec, markerMs, coverMs string
}

// New returns a Cache on rdb. reg may be nil. rdb should be built with
// ContextTimeoutEnabled so that Options.Timeout bounds a hung Redis, not
// only a dead one.
func New(rdb redis.UniversalClient, opt Options, reg prometheus.Registerer) *Cache {
	opt = opt.withDefaults()
	return &Cache{
		rdb:      rdb,
		opt:      opt,
		m:        newMetrics(reg),
		hot:      newHotSpots(opt.HotWindow, opt.HotReads),
		lru:      newPageLRU(opt.LRUSize),
		ttlSec:   strconv.FormatInt(int64((opt.TTL+time.Second-1)/time.Second), 10),
		markerMs: strconv.FormatInt(opt.MarkerTTL.Milliseconds(), 10),
		coverMs:  strconv.FormatInt(opt.CoverageTTL.Milliseconds(), 10),
	}
}

// FillToken is the conversation's version seen by BeginFill.
type FillToken struct{ inc, ep string }

// WriteToken names one writer's pending-write marker.
type WriteToken struct{ id string }

type keys struct{ meta, zset, maxseq string }

func keysOf(conv uint64) keys {
	tag := "{" + strconv.FormatUint(conv, 10) + "}"
	return keys{meta: "im:hist:meta:" + tag, zset: "im:hist:conv:" + tag, maxseq: "im:hist:maxseq:" + tag}
}

func randomID() string { return strconv.FormatUint(rand.Uint64(), 36) }

// run executes one script under the per-call timeout and records latency.
func (c *Cache) run(ctx context.Context, op string, s *redis.Script, keys []string, args ...any) (any, error) {
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
	now := time.Now()
	if !c.hot.touch(conv, now) {
		return c.read(ctx, op, conv, cursor, limit, false)
	}
	k := lruKey{conv: conv, op: op, cursor: cursor, limit: limit}
	if e, ok := c.lru.get(k, now); ok {
		ver, err := c.version(ctx, conv)
		if err != nil {
			c.m.misses.WithLabelValues(opNames[op], "redis_error").Inc()
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
	ctx, cancel := context.WithTimeout(ctx, c.opt.Timeout)
	defer cancel()
	t0 := time.Now()
	v, err := c.rdb.HMGet(ctx, keysOf(conv).meta, "inc", "ep").Result()
	c.m.latency.WithLabelValues("version").Observe(time.Since(t0).Seconds())
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
	k := keysOf(conv)
	reply, err := c.run(ctx, name, readScript, []string{k.meta, k.zset},
		string(op), strconv.FormatUint(cursor, 10), limit, c.coverMs)
	if err != nil {
		c.m.misses.WithLabelValues(name, "redis_error").Inc()
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
	k := keysOf(convID)
	reply, err := c.run(ctx, "begin_fill", beginFillScript, []string{k.meta}, randomID(), c.ttlSec, c.markerMs)
	if err != nil {
		c.m.fills.WithLabelValues("error").Inc()
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
		c.m.fills.WithLabelValues("error").Inc()
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
// invalidate the conversation because the marker is missing.
func (c *Cache) BeginWrite(ctx context.Context, convID uint64) (WriteToken, error) {
	tok := WriteToken{id: randomID()}
	k := keysOf(convID)
	_, err := c.run(ctx, "begin_write", beginWriteScript, []string{k.meta}, tok.id, randomID(), c.markerMs, c.ttlSec)
	return tok, err
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
	if err != nil {
		c.m.writes.WithLabelValues("error").Inc()
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
// and after Invalidate once an UPDATE/DELETE (recall) has committed.
func (c *Cache) AbortWrite(ctx context.Context, convID uint64, tok WriteToken) error {
	_, err := c.run(ctx, "abort_write", abortWriteScript, []string{keysOf(convID).meta}, tok.id)
	c.lru.dropConv(convID)
	return err
}

// Invalidate drops the conversation's cached range. Call it AFTER the commit
// of a recall, delete or update of conv_msg rows, while that write's marker
// is still held (BeginWrite -> commit -> Invalidate -> AbortWrite).
func (c *Cache) Invalidate(ctx context.Context, convID uint64) error {
	k := keysOf(convID)
	_, err := c.run(ctx, "invalidate", invalidateScript, []string{k.meta, k.zset})
	c.lru.dropConv(convID)
	if err == nil {
		c.m.invalidations.WithLabelValues("explicit").Inc()
	}
	return err
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
func (c *Cache) InvalidateAll(ctx context.Context) error {
	scan := func(ctx context.Context, rdb redis.UniversalClient) error {
		iter := rdb.Scan(ctx, 0, "im:hist:meta:{*}", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			open, close := strings.IndexByte(key, '{'), strings.IndexByte(key, '}')
			if open < 0 || close <= open {
				continue
			}
			conv, err := strconv.ParseUint(key[open+1:close], 10, 64)
			if err != nil {
				continue
			}
			if err := c.Invalidate(ctx, conv); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
	}
	return scan(ctx, c.rdb)
}
