package lograte

import (
	"testing"
	"time"
)

func TestLimiterBudgetPerKeyAndWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New[uint16](3, time.Second)
	l.now = func() time.Time { return now }

	allowed := 0
	for i := 0; i < 10; i++ {
		if ok, _ := l.Allow(1235); ok {
			allowed++
		}
	}
	if allowed != 3 {
		t.Fatalf("allowed %d of 10 in one window, want 3", allowed)
	}
	// Another key has its own budget.
	if ok, _ := l.Allow(1062); !ok {
		t.Fatal("key 1062 refused although it has logged nothing")
	}
	// Still the same window: refused.
	now = now.Add(999 * time.Millisecond)
	if ok, _ := l.Allow(1235); ok {
		t.Fatal("allowed a 4th event within the window")
	}
	// Next window: allowed, and the line reports the 8 refused ones.
	now = now.Add(time.Millisecond)
	ok, sup := l.Allow(1235)
	if !ok || sup != 8 {
		t.Fatalf("first event of the next window: ok=%v suppressed=%d, want true 8", ok, sup)
	}
	// The count was handed over once.
	if ok, sup := l.Allow(1235); !ok || sup != 0 {
		t.Fatalf("second event of the window: ok=%v suppressed=%d, want true 0", ok, sup)
	}
}

func TestLimiterOff(t *testing.T) {
	l := New[string](0, time.Second)
	if ok, _ := l.Allow("x"); ok {
		t.Fatal("a limiter of 0 per window allowed an event")
	}
}
