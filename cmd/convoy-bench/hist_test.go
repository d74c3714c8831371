package main

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

func TestBucketRoundTrip(t *testing.T) {
	for _, v := range []uint64{0, 1, 31, 32, 33, 63, 64, 1000, 123456, 1 << 40, 1<<63 + 12345, ^uint64(0)} {
		lo, hi := bucketRange(bucketOf(v))
		if v < lo || v > hi {
			t.Fatalf("v=%d in bucket %d = [%d, %d]", v, bucketOf(v), lo, hi)
		}
		if v >= subCount && float64(hi-lo+1)/float64(lo) > 1.0/subCount+1e-9 {
			t.Fatalf("bucket of %d too wide: [%d, %d]", v, lo, hi)
		}
	}
}

func TestQuantileAccuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h, h2 hist
	var vals []float64
	for i := 0; i < 100000; i++ {
		d := time.Duration(r.ExpFloat64() * float64(300*time.Microsecond))
		vals = append(vals, float64(d))
		if i%2 == 0 {
			h.record(d)
		} else {
			h2.record(d)
		}
	}
	h.merge(&h2)
	sort.Float64s(vals)
	for _, q := range []float64{0.5, 0.95, 0.99} {
		want := vals[int(q*float64(len(vals)))-1]
		got := float64(h.quantile(q))
		if got < want*0.96 || got > want*1.04 {
			t.Errorf("q%.2f = %v, exact %v", q, time.Duration(got), time.Duration(want))
		}
	}
	if h.n != 100000 {
		t.Fatalf("n = %d", h.n)
	}
}

func TestParseMix(t *testing.T) {
	w, err := parseMix("first=50, send=10,point")
	if err != nil || w[opFirst] != 50 || w[opSend] != 10 || w[opPoint] != 1 {
		t.Fatalf("%v %v", w, err)
	}
	if _, err := parseMix("frist=1"); err == nil {
		t.Fatal("unknown op accepted")
	}
}
