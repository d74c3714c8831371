package main

import (
	"math/bits"
	"time"
)

// hist is a log-bucket latency histogram in the spirit of HDR: values (in
// nanoseconds) below 2^subBits are exact; above that every power of two is
// split into 2^subBits equal sub-buckets, so the relative error of a
// reported percentile is below 1/2^subBits (about 3% with subBits = 5).
// Fixed size, no allocation per record, mergeable; not goroutine-safe (each
// worker owns one and they are merged at the end).
const (
	subBits    = 5
	subCount   = 1 << subBits
	histBucket = (64-subBits+1)*subCount + 1
)

type hist struct {
	counts [histBucket]uint64
	n      uint64
	sum    uint64
	max    uint64
	min    uint64
}

func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	e := bits.Len64(v) - 1 // v in [2^e, 2^(e+1))
	sub := (v >> (uint(e) - subBits)) & (subCount - 1)
	return (e-subBits+1)*subCount + int(sub)
}

// bucketRange is the [lo, hi] value range of bucket i.
func bucketRange(i int) (lo, hi uint64) {
	if i < subCount {
		return uint64(i), uint64(i)
	}
	e := i/subCount + subBits - 1
	sub := uint64(i % subCount)
	width := uint64(1) << (uint(e) - subBits)
	lo = (uint64(1) << uint(e)) + sub*width
	return lo, lo + width - 1
}

func (h *hist) record(d time.Duration) {
	v := uint64(d)
	if d < 0 {
		v = 0
	}
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += v
}

func (h *hist) merge(o *hist) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

// quantile returns the value at quantile q (0..1): the midpoint of the
// bucket holding the rank, clamped to the observed min/max.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	if rank < 1 {
		rank = 1
	}
	if rank > h.n {
		rank = h.n
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketRange(i)
			v := lo + (hi-lo)/2
			if v < h.min {
				v = h.min
			}
			if v > h.max {
				v = h.max
			}
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}

func (h *hist) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / h.n)
}
