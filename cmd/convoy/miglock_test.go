package main

import (
	"context"
	"testing"
	"time"

	"github.com/convoy-im/convoy/proxy/engine"
)

// TestShardHolderFence: the start-up fence holds every shard; a lock
// follower takes a fenced shard over instead of failing to hold it; a
// follower that failed to start leaves its holds to the fence, so the next
// one can hold those shards; lifting the fence frees the rest but not what
// the follower holds.
func TestShardHolderFence(t *testing.T) {
	e := engine.New(nil, nil, nil, nil, engine.Options{})
	h := &shardHolder{e: e}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// A first follower held shard 3, then failed to start.
	if _, err := h.Hold(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := h.fenceAll(errUnregistered); err != nil {
		t.Fatalf("fencing over a failed follower's hold: %v", err)
	}
	if _, err := e.Hold(ctx, 7); err == nil {
		t.Fatal("shard 7 is not held by the fence")
	}
	// The next follower takes shards 3 and 7 over, then fails too.
	for _, sh := range []int{3, 7} {
		if _, err := h.Hold(ctx, sh); err != nil {
			t.Fatalf("a follower cannot hold fenced shard %d: %v", sh, err)
		}
	}
	if err := h.fenceAll(errUnregistered); err != nil {
		t.Fatal(err)
	}
	// The one that starts holds 7 for a lock; the fence lifts.
	followed, err := h.Hold(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	h.liftFence()
	if _, err := e.Hold(ctx, 7); err == nil {
		t.Fatal("lifting the fence released the shard the follower holds")
	}
	for _, sh := range []int{3, 8} {
		other, err := e.Hold(ctx, sh)
		if err != nil {
			t.Fatalf("shard %d still fenced: %v", sh, err)
		}
		other.Release()
	}
	followed.Release()
	again, err := e.Hold(ctx, 7)
	if err != nil {
		t.Fatalf("shard 7 still held after the follower released it: %v", err)
	}
	again.Release()
}
