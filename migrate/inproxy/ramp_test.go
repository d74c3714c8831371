package inproxy

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/migrate/internal/jobrec"
	"github.com/convoy-im/convoy/router"
)

// keyRecorder is a RampStatsWriter that keeps the keys written.
type keyRecorder struct {
	mu   sync.Mutex
	keys map[string]string
	fail bool
}

func (k *keyRecorder) Put(_ context.Context, key, value string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail {
		return fmt.Errorf("etcd unreachable")
	}
	if k.keys == nil {
		k.keys = map[string]string{}
	}
	k.keys[key] = value
	return nil
}

func (k *keyRecorder) Delete(_ context.Context, key string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail {
		return fmt.Errorf("etcd unreachable")
	}
	delete(k.keys, key)
	return nil
}

func (k *keyRecorder) has(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.keys[key]
	return ok
}

func (k *keyRecorder) value(key string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys[key]
}

func shardKey(sh int) string { return fmt.Sprintf("ramping/%04d", sh) }

// announceWith runs one round of the announcer with w.
func announceWith(r *Ramps, w RampStatsWriter) {
	r.announce(context.Background(), w, shardKey, zap.NewNop())
}

// announceAll announces r's ramps (to a writer nothing reads).
func announceAll(r *Ramps) { announceWith(r, &keyRecorder{}) }

func rampJob(step string, percent int, lag float64) *coord.Job {
	p := jobrec.Progress{}
	zero := 0
	p.State.Table = &zero // the shard's shared physical table
	p.Commands.ReadPercent = percent
	p.State.Status.RampPercent = percent // confirmed by the runner
	p.State.Status.Lag = lag
	return &coord.Job{ID: "j", Shard: 5, Step: step, From: coord.Endpoint{Datasource: "ds0", Database: "im_0"},
		To: coord.Endpoint{Datasource: "ds1", Database: "im_mig"}, Progress: encodeProgress(p)}
}

// TestRamps: a ready job's READ PERCENT sends that share of the shard's
// keys to the target, only while the lag is under the bound and the
// runner's status is fresh; other shards, other steps and a deleted job
// send nothing.
func TestRamps(t *testing.T) {
	doc, err := router.SharedLayout([]router.Datasource{{Name: "ds0", Addr: "a:1"}, {Name: "ds1", Addr: "b:1"}}, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := router.NewSnapshot(doc)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	r, err := NewRamps(nil)
	if err != nil {
		t.Fatal(err)
	}
	r.now = func() time.Time { return now }
	var keys []uint64 // keys of shard 5
	for k := uint64(1); len(keys) < 400; k++ {
		if router.ShardOf(k) == 5 {
			keys = append(keys, k)
		}
	}
	moved := func() int {
		n := 0
		for _, k := range keys {
			if alt, _ := r.ReadSnapshot(snap, 5, k); alt != nil {
				if got := alt.Target(5); got.Datasource != "ds1" || got.Database != "im_mig" || got.Table != 0 {
					t.Fatalf("ramped target %+v", got)
				}
				if alt.Target(6) != snap.Target(6) {
					t.Fatal("the ramp moved another shard")
				}
				n++
			}
		}
		return n
	}
	if moved() != 0 {
		t.Fatal("reads moved with no job")
	}
	p := rampJob(jobrec.StepReady, 50, 0)
	pr, _ := jobrec.Decode(*p)
	r.Update(5, p)
	// Not before the proxy announced it ramps the shard.
	w := &keyRecorder{fail: true}
	announceWith(r, w)
	if moved() != 0 {
		t.Fatal("reads moved before the proxy could announce its ramp")
	}
	w.fail = false
	announceWith(r, w)
	if !w.has(shardKey(5)) {
		t.Fatal("the ramping key was not written")
	}
	if n := moved(); n < 160 || n > 240 {
		t.Fatalf("%d of 400 keys ramped at 50%%", n)
	}
	// The same keys at 50%, a superset at 80%.
	first := map[uint64]bool{}
	for _, k := range keys {
		alt, _ := r.ReadSnapshot(snap, 5, k)
		first[k] = alt != nil
	}
	// READ PERCENT 80 not confirmed by the runner yet: still 50 %.
	pr.Commands.ReadPercent = 80
	p.Progress = encodeProgress(pr)
	r.Update(5, p)
	announceWith(r, w)
	if n := moved(); n < 160 || n > 240 {
		t.Fatalf("%d of 400 keys ramped at READ PERCENT 80 confirmed at 50", n)
	}
	if !w.has(shardKey(5)) || w.value(shardKey(5)) != "80" {
		t.Fatalf("the proxy announced %q, want the 80 %% it mirrors", w.value(shardKey(5)))
	}
	pr.State.Status.RampPercent = 80
	p.Progress = encodeProgress(pr)
	r.Update(5, p)
	for _, k := range keys {
		if alt, _ := r.ReadSnapshot(snap, 5, k); first[k] && alt == nil {
			t.Fatalf("key %d left the target when the share grew", k)
		}
	}
	if n := moved(); n < 280 {
		t.Fatalf("%d of 400 keys ramped at 80 %% confirmed", n)
	}
	now = now.Add(RampFresh + time.Second)
	if moved() != 0 {
		t.Fatal("reads stayed on the target with no news from the runner")
	}
	pr.State.Status.Lag = 2
	p.Progress = encodeProgress(pr)
	r.Update(5, p)
	if moved() != 0 {
		t.Fatal("reads moved while the apply lagged 2 s")
	}
	r.Update(5, rampJob(jobrec.StepBackfill, 50, 0))
	if moved() != 0 {
		t.Fatal("reads moved before the target was verified")
	}
	r.Update(5, rampJob(jobrec.StepReady, 100, 0))
	announceWith(r, w)
	if moved() != len(keys) {
		t.Fatal("not every read moved at 100%")
	}
	// A rollback asked for (the DBA's command, then the runner's intent)
	// ends the ramp at once; the key goes rampGrace later.
	rb := rampJob(jobrec.StepReady, 100, 0)
	prb, _ := jobrec.Decode(*rb)
	prb.Commands.Rollback = true
	rb.Progress = encodeProgress(prb)
	r.Update(5, rb)
	if moved() != 0 {
		t.Fatal("reads still ramped with ROLLBACK asked for")
	}
	announceWith(r, w)
	if !w.has(shardKey(5)) {
		t.Fatal("the ramping key went before the grace for reads in flight")
	}
	now = now.Add(rampGrace)
	announceWith(r, w)
	if w.has(shardKey(5)) {
		t.Fatal("the ramping key stayed after the ramp ended")
	}
	r.Update(5, rampJob(jobrec.StepReady, 100, 0))
	announceWith(r, w)
	rb = rampJob(jobrec.StepReady, 100, 0)
	rb.Intent = jobrec.IntentRollback
	r.Update(5, rb)
	if moved() != 0 {
		t.Fatal("reads still ramped during the rollback")
	}
	r.Update(5, nil)
	if moved() != 0 || r.active.Load() != 0 {
		t.Fatal("a deleted job still ramps reads")
	}
}
