package ratelimit

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The limiter starts empty, so n tokens at rate r can never pass in less
// than n/r: a lower bound, not a timing race. The upper bound is generous
// (a loaded 2-core machine) and only catches a limiter that sleeps far too
// long.
func TestLimiterRate(t *testing.T) {
	const rate, total, chunk = 10000.0, 5000, 500
	l := New(rate)
	start := time.Now()
	for done := 0; done < total; done += chunk {
		if err := l.Wait(context.Background(), chunk); err != nil {
			t.Fatal(err)
		}
	}
	el := time.Since(start)
	want := time.Duration(total / rate * float64(time.Second))
	if el < want*95/100 {
		t.Errorf("%d tokens at %.0f/s passed in %v, want >= %v", total, rate, el, want)
	}
	if el > 4*want {
		t.Errorf("%d tokens at %.0f/s took %v, want about %v", total, rate, el, want)
	}
}

func TestLimiterBurst(t *testing.T) {
	l := New(1000)
	if err := l.Wait(context.Background(), 100); err != nil {
		t.Fatal(err)
	}
	// An idle limiter saves at most a quarter second: after 600 ms idle at
	// 1000/s, 250 pass at once and the next 250 wait about 250 ms.
	time.Sleep(600 * time.Millisecond)
	start := time.Now()
	if err := l.Wait(context.Background(), 500); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 230*time.Millisecond {
		t.Errorf("500 tokens after idling passed in %v; the burst should be capped at 250", el)
	}
}

func TestLimiterSetRateWakesWaiter(t *testing.T) {
	l := New(1) // 10 tokens would take 10 s
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- l.Wait(context.Background(), 10) }()
	time.Sleep(50 * time.Millisecond)
	l.SetRate(1e6)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el > 2*time.Second {
			t.Errorf("Wait returned after %v", el)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SetRate did not wake the waiter")
	}
	l.SetRate(0) // unlimited
	start = time.Now()
	if err := l.Wait(context.Background(), 1e9); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 50*time.Millisecond {
		t.Errorf("unlimited Wait took %v", el)
	}
}

func TestLimiterCancel(t *testing.T) {
	l := New(100)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.Wait(ctx, 1000); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want DeadlineExceeded", err)
	}
	// The cancelled reservation was given back: 10 more tokens wait about
	// 100 ms, not the 10 s the abandoned 1000 would have cost.
	start := time.Now()
	if err := l.Wait(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Wait after a cancelled reservation took %v", el)
	}
}
