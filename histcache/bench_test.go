package histcache

import (
	"testing"
)

// BenchmarkBeforeHit: the first screen (20 entries) of a cached
// conversation, through the Lua read script (LRU off).
func BenchmarkBeforeHit(b *testing.B) {
	c, _, _ := setup(b, testOpts())
	const conv = 1
	warm(b, c, conv)
	mustFill(b, c, conv, mkEntries(1, 500), 0, NoUpperBound)
	b.ReportAllocs()
	for b.Loop() {
		if page, ok, err := c.Before(bg, conv, 501, 20); !ok || len(page) != 20 {
			b.Fatalf("miss: %v", err)
		}
	}
}

// BenchmarkBeforeHitHotLRU: the same page of a hot conversation, served
// from the in-process LRU after one HMGET epoch check.
func BenchmarkBeforeHitHotLRU(b *testing.B) {
	opt := testOpts()
	opt.HotReads = 1
	c, _, _ := setup(b, opt)
	const conv = 1
	warm(b, c, conv)
	mustFill(b, c, conv, mkEntries(1, 500), 0, NoUpperBound)
	b.ReportAllocs()
	for b.Loop() {
		if page, ok, err := c.Before(bg, conv, 501, 20); !ok || len(page) != 20 {
			b.Fatalf("miss: %v", err)
		}
	}
}

// BenchmarkWrite: BeginWrite + EndWrite of one message (write-through,
// trim at 500), i.e. the Redis cost the engine adds to one INSERT.
func BenchmarkWrite(b *testing.B) {
	c, _, _ := setup(b, testOpts())
	const conv = 1
	warm(b, c, conv)
	mustFill(b, c, conv, mkEntries(1, 500), 0, NoUpperBound)
	seq := uint64(500)
	b.ReportAllocs()
	for b.Loop() {
		seq++
		tok, err := c.BeginWrite(bg, conv)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.EndWrite(bg, conv, tok, mkEntries(seq, seq)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEndWrite: the write-through alone (BeginWrite off the clock).
func BenchmarkEndWrite(b *testing.B) {
	c, _, _ := setup(b, testOpts())
	const conv = 1
	warm(b, c, conv)
	mustFill(b, c, conv, mkEntries(1, 500), 0, NoUpperBound)
	seq := uint64(500)
	b.ReportAllocs()
	for b.Loop() {
		seq++
		b.StopTimer()
		tok, err := c.BeginWrite(bg, conv)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := c.EndWrite(bg, conv, tok, mkEntries(seq, seq)); err != nil {
			b.Fatal(err)
		}
	}
}
