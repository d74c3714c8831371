package main

import (
	"context"
	"testing"
	"time"

	"github.com/convoy-im/convoy/proxy/engine"
)

// TestShardHolderFence: the start-up fence holds every shard; the lock
// follower takes a fenced shard over instead of failing to hold it; lifting
// the fence frees the rest but not what the follower holds.
func TestShardHolderFence(t *testing.T) {
	e := engine.New(nil, nil, nil, nil, engine.Options{})
	h := &shardHolder{e: e}
	if err := h.fenceAll(errUnregistered); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := e.Hold(ctx, 7); err == nil {
		t.Fatal("shard 7 is not held by the fence")
	}
	followed, err := h.Hold(ctx, 7)
	if err != nil {
		t.Fatalf("the follower cannot hold a fenced shard: %v", err)
	}
	h.liftFence()
	if _, err := e.Hold(ctx, 7); err == nil {
		t.Fatal("lifting the fence released the shard the follower holds")
	}
	other, err := e.Hold(ctx, 8)
	if err != nil {
		t.Fatalf("shard 8 still fenced: %v", err)
	}
	other.Release()
	followed.Release()
	again, err := e.Hold(ctx, 7)
	if err != nil {
		t.Fatalf("shard 7 still held after the follower released it: %v", err)
	}
	again.Release()
}
