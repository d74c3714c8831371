// Package lograte bounds how many log lines one kind of event may write, so
// that a misbehaving client or a dead dependency cannot flood the log (and
// the disk, and whoever reads it) with the same line thousands of times a
// second. It is a per-key budget per window, not a sampler: the first lines
// of a window always go out, and the line that opens the next window says
// how many were left out.
package lograte

import (
	"sync"
	"time"
)

// Limiter allows at most Per events of each key in every Window. Keys are
// meant to be few (errnos, a subsystem name): state is kept per key for the
// life of the Limiter.
type Limiter[K comparable] struct {
	per    int
	window time.Duration
	now    func() time.Time

	mu   sync.Mutex
	keys map[K]*budget
}

type budget struct {
	start      time.Time // beginning of the current window
	used       int       // events allowed in it
	suppressed uint64    // events refused since the last allowed one
}

// New returns a limiter of per events per window and key; per <= 0 allows
// nothing.
func New[K comparable](per int, window time.Duration) *Limiter[K] {
	return &Limiter[K]{per: per, window: window, now: time.Now, keys: map[K]*budget{}}
}

// Allow reports whether an event of key may be logged now and, when it may,
// how many events of that key were refused since the last allowed one (to be
// written on this line, so nothing disappears without a trace).
func (l *Limiter[K]) Allow(key K) (ok bool, suppressed uint64) {
	if l.per <= 0 {
		return false, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.keys[key]
	if b == nil {
		b = &budget{start: now}
		l.keys[key] = b
	}
	if now.Sub(b.start) >= l.window {
		b.start, b.used = now, 0
	}
	if b.used >= l.per {
		b.suppressed++
		return false, 0
	}
	b.used++
	suppressed, b.suppressed = b.suppressed, 0
	return true, suppressed
}
