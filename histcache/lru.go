package histcache

import (
	"container/list"
	"sync"
	"time"
)

// hotSpots estimates each conversation's read rate over a sliding window
// (two fixed buckets, the previous one weighted by how much of it still
// overlaps the window). Memory is bounded by the conversations read in the
// last two windows.
type hotSpots struct {
	mu        sync.Mutex
	window    time.Duration
	threshold float64
	start     time.Time
	cur, prev map[uint64]int
}

func newHotSpots(window time.Duration, threshold int) *hotSpots {
	return &hotSpots{window: window, threshold: float64(threshold), cur: map[uint64]int{}, prev: map[uint64]int{}}
}

// touch counts one read of conv and reports whether conv is hot.
func (h *hotSpots) touch(conv uint64, now time.Time) bool {
	if h.threshold <= 0 {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if el := now.Sub(h.start); el >= h.window {
		if el >= 2*h.window {
			clear(h.prev)
		} else {
			h.prev = h.cur
		}
		h.cur = make(map[uint64]int, len(h.prev))
		h.start = now
	}
	h.cur[conv]++
	overlap := 1 - float64(now.Sub(h.start))/float64(h.window)
	return float64(h.cur[conv])+float64(h.prev[conv])*overlap >= h.threshold
}

type lruKey struct {
	conv   uint64
	op     byte
	cursor uint64
	limit  int
}

type lruEntry struct {
	key      lruKey
	page     []Entry
	version  string // meta "inc:ep" when the page was read from Redis
	deadline time.Time
}

// pageLRU is a small LRU of pages of hot conversations. An entry is only a
// candidate: Cache serves it after checking that the conversation's Redis
// version is still the one the page was read at.
type pageLRU struct {
	mu    sync.Mutex
	size  int
	ll    *list.List
	items map[lruKey]*list.Element
}

func newPageLRU(size int) *pageLRU {
	return &pageLRU{size: size, ll: list.New(), items: map[lruKey]*list.Element{}}
}

func (l *pageLRU) get(k lruKey, now time.Time) (*lruEntry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	el, ok := l.items[k]
	if !ok {
		return nil, false
	}
	e := el.Value.(*lruEntry)
	if !now.Before(e.deadline) {
		l.ll.Remove(el)
		delete(l.items, k)
		return nil, false
	}
	l.ll.MoveToFront(el)
	return e, true
}

func (l *pageLRU) put(e *lruEntry) {
	if l.size <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, ok := l.items[e.key]; ok {
		el.Value = e
		l.ll.MoveToFront(el)
		return
	}
	l.items[e.key] = l.ll.PushFront(e)
	for l.ll.Len() > l.size {
		old := l.ll.Back()
		l.ll.Remove(old)
		delete(l.items, old.Value.(*lruEntry).key)
	}
}

func (l *pageLRU) remove(k lruKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, ok := l.items[k]; ok {
		l.ll.Remove(el)
		delete(l.items, k)
	}
}

// dropConv forgets every page of conv (at most size entries to look at).
func (l *pageLRU) dropConv(conv uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for el := l.ll.Front(); el != nil; {
		next := el.Next()
		if e := el.Value.(*lruEntry); e.key.conv == conv {
			l.ll.Remove(el)
			delete(l.items, e.key)
		}
		el = next
	}
}
