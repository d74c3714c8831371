// Package ratelimit is a token bucket of rows per second, shared by the
// jobs that read live shards (migration copies and checksums, archiving).
package ratelimit

import (
	"context"
	"sync"
	"time"
)

// BurstSeconds bounds what a limiter saves up while its user is slow (a
// slow target write, a pause): a quarter second of rows. Over any window W
// the rows let through stay under rate*W + rate/4, i.e. within 2.5% of the
// rate over ten seconds, and one hiccup is made up by one chunk.
const BurstSeconds = 0.25

// Limiter is a token bucket counting rows. Several copiers may share one
// (the five tables of one shard share the shard's rate). It starts empty,
// so n rows never pass in less than n/rate seconds: a lower bound a test
// can assert without timing flakes.
//
// Waiters are served in arrival order by tickets: each Wait takes the next
// n tokens of a running total and returns once the bucket's running credit
// reaches its ticket. SetRate wakes every waiter to recompute its wait, so
// a rate raised from 10 to 2000 rows/s takes effect at once, not after the
// 10 rows/s sleep.
type Limiter struct {
	mu      sync.Mutex
	rate    float64 // tokens per second; <= 0 means unlimited
	credit  float64 // tokens the bucket has produced (refills and refunds)
	issued  float64 // tokens handed out (tickets)
	last    time.Time
	changed chan struct{} // closed and replaced when waiters must recompute
}

// New returns a limiter at rowsPerSec (<= 0: unlimited).
func New(rowsPerSec float64) *Limiter {
	return &Limiter{rate: rowsPerSec, last: time.Now(), changed: make(chan struct{})}
}

// Rate is the current rate in rows per second (<= 0: unlimited).
func (l *Limiter) Rate() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rate
}

// SetRate changes the rate, effective for waiters already sleeping.
func (l *Limiter) SetRate(rowsPerSec float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.refill(now)
	if l.rate <= 0 && rowsPerSec > 0 {
		// Unlimited handed out tokens without counting credit: start the
		// limited stretch with an empty bucket.
		l.credit = l.issued
	}
	l.rate = rowsPerSec
	l.wake()
}

// refill credits the tokens produced since last, keeping at most a burst
// of unused ones. Credit below issued means waiters are queued; the cap
// only bites when nobody waits.
func (l *Limiter) refill(now time.Time) {
	if l.rate > 0 {
		l.credit += l.rate * now.Sub(l.last).Seconds()
		if ceiling := l.issued + l.rate*BurstSeconds; l.credit > ceiling {
			l.credit = ceiling
		}
	}
	l.last = now
}

func (l *Limiter) wake() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Wait blocks until n rows may pass or ctx ends (then the rows are given
// back and ctx's error returned).
func (l *Limiter) Wait(ctx context.Context, n int) error {
	if n <= 0 {
		return nil
	}
	l.mu.Lock()
	l.refill(time.Now())
	if l.rate <= 0 {
		l.issued += float64(n)
		l.credit = l.issued
		l.mu.Unlock()
		return nil
	}
	l.issued += float64(n)
	ticket := l.issued
	for {
		if l.rate <= 0 || l.credit >= ticket {
			l.mu.Unlock()
			return nil
		}
		wait := time.Duration((ticket - l.credit) / l.rate * float64(time.Second))
		changed := l.changed
		l.mu.Unlock()

		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			l.refund(n)
			return ctx.Err()
		case <-changed:
			timer.Stop()
		case <-timer.C:
		}
		l.mu.Lock()
		l.refill(time.Now())
	}
}

// refund gives back rows a cancelled Wait reserved, so the waiters behind
// it do not pay for them.
func (l *Limiter) refund(n int) {
	if n <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refill(time.Now())
	l.credit += float64(n)
	if ceiling := l.issued + l.rate*BurstSeconds; l.rate > 0 && l.credit > ceiling {
		l.credit = ceiling
	}
	l.wake()
}
