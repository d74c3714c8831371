package histcache

import (
	"sync"
	"sync/atomic"
	"time"
)

// unrepaired is what this proxy owes Redis: the conversations whose cached
// state may lack a write it committed, because the write's marker or its
// invalidation never reached Redis (the breaker was open, or a call failed
// or timed out). Until a conversation is repaired (invalidated after its
// writes committed) this proxy neither serves nor fills it from Redis;
// other proxies may, which is the "No marker at all" window of doc.go.
//
// A conversation with an unmarked write still in flight (BeginWrite failed,
// the commit not finished) cannot be repaired yet: an invalidation before
// the commit would let a fill install the range without the row. It waits
// for end, which is called after the commit (or rollback), or for lease
// (MarkerTTL) after the write began: the protocol's assumption that a
// commit completes within MarkerTTL of BeginWrite says it is done by then,
// and a token its caller never finished must not block the conversation
// forever.
//
// Past max conversations the set gives up on them and asks for a reset of
// the whole tier (all), which covers every conversation noted before it.
type unrepaired struct {
	max   int
	lease time.Duration
	now   func() time.Time

	mu     sync.Mutex
	convs  map[uint64]*owed
	all    bool
	allSeq uint64 // seq when all was last set
	seq    uint64 // bumped by every note; a repair covers notes up to its start
	n      atomic.Int64
	gauge  func(float64) // conversations noted, for the metric
	onAll  func()        // the set overflowed (or a tier-wide invalidation failed)
}

type owed struct {
	inflight int       // unmarked writes not ended yet
	begun    time.Time // when the latest of them began
	seq      uint64    // seq of the latest note
	needs    bool      // an invalidation is owed (not only an in-flight write)
}

// settled: no unmarked write of the conversation can still commit.
func (e *owed) settled(now time.Time, lease time.Duration) bool {
	return e.inflight == 0 || now.Sub(e.begun) > lease
}

func newUnrepaired(max int, lease time.Duration) *unrepaired {
	return &unrepaired{max: max, lease: lease, now: time.Now, convs: map[uint64]*owed{}, gauge: func(float64) {}, onAll: func() {}}
}

// has reports whether conv must not be served or filled from Redis. The
// common case (nothing owed) is one atomic load.
func (u *unrepaired) has(conv uint64) bool {
	if u.n.Load() == 0 {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.all || u.convs[conv] != nil
}

// begin notes an unmarked write of conv about to commit.
func (u *unrepaired) begin(conv uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	e := u.entry(conv)
	u.seq++
	e.inflight, e.begun, e.seq = e.inflight+1, u.now(), u.seq
	u.tidy()
}

// end notes that an unmarked write of conv has committed or rolled back:
// the conversation is owed an invalidation.
func (u *unrepaired) end(conv uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	e := u.entry(conv)
	if e.inflight > 0 {
		e.inflight--
	}
	u.owe(e)
	u.tidy()
}

// mark notes an invalidation of conv (or a write-through after a marked
// commit) that may not have reached Redis.
func (u *unrepaired) mark(conv uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.owe(u.entry(conv))
	u.tidy()
}

// markAll notes that the whole tier must be invalidated.
func (u *unrepaired) markAll() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.setAll()
	u.tidy()
}

// todo is what a repair starting now should invalidate: the whole tier, or
// the conversations owed an invalidation with no write in flight. seq is
// handed back to repaired.
func (u *unrepaired) todo() (all bool, convs []uint64, seq uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.all {
		now := u.now()
		for c, e := range u.convs {
			if e.settled(now, u.lease) && (e.needs || e.inflight > 0) {
				convs = append(convs, c)
			}
		}
	}
	return u.all, convs, u.seq
}

// repaired records a successful invalidation that started at seq: of the
// whole tier (all) or of convs. Notes made after seq stay.
func (u *unrepaired) repaired(all bool, convs []uint64, seq uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := u.now()
	clear := func(c uint64, e *owed) {
		if e.seq <= seq && e.settled(now, u.lease) {
			e.needs, e.inflight = false, 0 // a late end notes it again
		}
		if !e.needs && e.inflight == 0 {
			delete(u.convs, c)
		}
	}
	if all {
		if u.allSeq <= seq {
			u.all = false
		}
		for c, e := range u.convs {
			clear(c, e)
		}
	}
	for _, c := range convs {
		if e := u.convs[c]; e != nil {
			clear(c, e)
		}
	}
	u.tidy()
}

// pending reports whether a repair would have something to do.
func (u *unrepaired) pending() bool {
	if u.n.Load() == 0 {
		return false
	}
	all, convs, _ := u.todo()
	return all || len(convs) > 0
}

// size is the number of conversations noted and whether a reset is owed.
func (u *unrepaired) size() (int, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.convs), u.all
}

func (u *unrepaired) entry(conv uint64) *owed {
	e := u.convs[conv]
	if e == nil {
		e = &owed{}
		u.convs[conv] = e
	}
	return e
}

func (u *unrepaired) owe(e *owed) {
	u.seq++
	e.seq, e.needs = u.seq, true
}

func (u *unrepaired) setAll() {
	u.seq++
	was := u.all
	u.all, u.allSeq = true, u.seq
	if !was {
		u.onAll()
	}
}

// tidy enforces the bound and publishes the counts; call with mu held.
func (u *unrepaired) tidy() {
	if len(u.convs) > u.max {
		u.setAll()
		now := u.now()
		for c, e := range u.convs {
			if e.settled(now, u.lease) { // the reset covers it; in-flight ones still end later
				delete(u.convs, c)
			}
		}
	}
	n := int64(len(u.convs))
	if u.all {
		n++
	}
	u.n.Store(n)
	u.gauge(float64(len(u.convs)))
}
