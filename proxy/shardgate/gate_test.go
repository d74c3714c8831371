package shardgate

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/router"
)

type noMetrics struct{}

func (noMetrics) HoldQueued(float64)        {}
func (noMetrics) HoldWaited(time.Duration)  {}
func (noMetrics) HoldRefused(reason string) {}

func newGates() *Gates { return New(Options{MaxWait: 2 * time.Second, MaxQueue: 10}, noMetrics{}) }

// A hold waits for the write admitted before it, queues the one after it,
// and lets it through at Release.
func TestHoldWaitsAndQueues(t *testing.T) {
	g := newGates()
	sh := []router.Shard{7}
	if err := g.Admit(sh, nil); err != nil {
		t.Fatal(err)
	}
	held := make(chan *ShardHold)
	go func() {
		h, err := g.Hold(context.Background(), 7)
		if err != nil {
			t.Error(err)
		}
		held <- h
	}()
	for !g.Held(7) {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-held:
		t.Fatal("the hold did not wait for the write admitted before it")
	case <-time.After(20 * time.Millisecond):
	}
	g.Leave(sh)
	h := <-held
	admitted := make(chan error)
	go func() { admitted <- g.Admit(sh, nil) }()
	for h.Queued() != 1 {
		time.Sleep(time.Millisecond)
	}
	if g.Active(7) != 0 {
		t.Fatalf("a queued write counts as active (%d)", g.Active(7))
	}
	h.Release()
	if err := <-admitted; err != nil {
		t.Fatal(err)
	}
	if g.Active(7) != 1 || g.Held(7) {
		t.Fatalf("after release: active %d, held %v", g.Active(7), g.Held(7))
	}
	g.Leave(sh)
}

// A hold whose time runs out fails the idle transaction at once (rolled
// back, its count gone) and holds; the transaction's next call gets the
// error.
func TestHoldFailsIdleTransaction(t *testing.T) {
	g := newGates()
	sh := []router.Shard{3}
	if err := g.Admit(sh, nil); err != nil {
		t.Fatal(err)
	}
	var aborted atomic.Bool
	txn := g.Register(3, func() { aborted.Store(true) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	h, err := g.Hold(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	for !aborted.Load() {
		time.Sleep(time.Millisecond)
	}
	var ee *sqlerr.Error
	if err := txn.Enter(); !errors.As(err, &ee) || ee.Code != sqlerr.TxnRolledBack {
		t.Fatalf("the failed transaction's next call: %v", err)
	}
	txn.End(func() { t.Error("a transaction the hold ended was released again") })
}

// A fence refuses every write until lifted; a write waiting behind a hold
// that fails gets the hold's error.
func TestFenceAndFailedHold(t *testing.T) {
	g := newGates()
	f, running := g.Fence(context.Background(), errors.New("registration in doubt"))
	if running != 0 {
		t.Fatalf("%d running", running)
	}
	var ee *sqlerr.Error
	if err := g.Admit([]router.Shard{1}, nil); !errors.As(err, &ee) || ee.Code != sqlerr.ShardUnavailable {
		t.Fatalf("a write under the fence: %v", err)
	}
	f.Lift()
	if g.Fenced() || g.Active(1) != 0 {
		t.Fatal("fence still up, or the refused write still counted")
	}
	h, err := g.Hold(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	admitted := make(chan error)
	go func() { admitted <- g.Admit([]router.Shard{1}, nil) }()
	for h.Queued() != 1 {
		time.Sleep(time.Millisecond)
	}
	h.Fail(errors.New("switch unresolved"))
	if err := <-admitted; !errors.As(err, &ee) || ee.Code != sqlerr.ShardUnavailable {
		t.Fatalf("a write queued behind a failed hold: %v", err)
	}
	h.Release()
	stop := make(chan struct{})
	h2, err := g.Hold(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Release()
	go func() { admitted <- g.Admit([]router.Shard{1}, stop) }()
	for h2.Queued() != 1 {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	if err := <-admitted; !errors.As(err, &ee) || ee.Code != sqlerr.QueryInterrupted {
		t.Fatalf("a killed wait: %v", err)
	}
}
