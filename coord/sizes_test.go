package coord

import (
	"context"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/etcdtest"
)

// TestSizeSamples: the first sample of a day wins, later ones of the same
// day are kept out, and only the newest KeepSamples days stay.
func TestSizeSamples(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	day0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range KeepSamples + 4 {
		d := day0.AddDate(0, 0, i)
		s := SizeSample{Day: d.Format("20060102"), Taken: d}
		s.Shards[7] = [2]int64{int64(i), int64(10 * i)}
		stored, err := PutDailySample(ctx, cli, "c1", s)
		if err != nil || !stored {
			t.Fatalf("day %d: stored %v, %v", i, stored, err)
		}
		s.Shards[7] = [2]int64{-1, -1}
		if again, err := PutDailySample(ctx, cli, "c1", s); err != nil || again {
			t.Fatalf("second sample of day %d: stored %v, %v", i, again, err)
		}
	}
	got, err := SizeSamples(ctx, cli, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != KeepSamples || got[0].Day != day0.AddDate(0, 0, 4).Format("20060102") || got[len(got)-1].Shards[7][0] != KeepSamples+3 {
		t.Fatalf("%d samples, first %s, last %v", len(got), got[0].Day, got[len(got)-1].Shards[7])
	}
	if _, err := PutDailySample(ctx, cli, "c1", SizeSample{Day: "2026-01-01"}); err == nil {
		t.Fatal("a malformed day was accepted")
	}
}
