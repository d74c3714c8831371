package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/proxy/engine"
	"github.com/convoy-im/convoy/proxy/sqlerr"
)

// TestShardHolderFence: the start-up fence refuses every sharded write; a
// lock follower takes over a hold a failed follower left instead of failing
// to hold that shard; lifting the fence frees those holds but not what the
// running follower holds.
func TestShardHolderFence(t *testing.T) {
	e := engine.New(nil, nil, nil, nil, engine.Options{})
	h := &shardHolder{e: e}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// A first follower held shard 3, then failed to start.
	if _, err := h.Hold(ctx, 3); err != nil {
		t.Fatal(err)
	}
	h.fenceAll(errUnregistered)
	s := e.NewSession("im")
	_, err := s.Query("DELETE FROM im_inbox WHERE uid = 9")
	if ee := (*sqlerr.Error)(nil); !errors.As(err, &ee) || ee.Code != sqlerr.ShardUnavailable || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("a write under the start-up fence: %v, want CodeShardUnavailable naming the registration", err)
	}
	// The next follower takes shard 3 over and holds 7, then fails too.
	for _, sh := range []int{3, 7} {
		if _, err := h.Hold(ctx, sh); err != nil {
			t.Fatalf("a follower cannot hold shard %d: %v", sh, err)
		}
	}
	h.fenceAll(errUnregistered)
	// The one that starts holds 7 for a lock; the fence lifts.
	followed, err := h.Hold(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	h.liftFence()
	if h.startup != nil {
		t.Fatal("liftFence left the start-up fence up")
	}
	if _, err := e.Hold(ctx, 7); err == nil {
		t.Fatal("lifting the fence released the shard the follower holds")
	}
	for _, sh := range []int{3, 8} {
		other, err := e.Hold(ctx, sh)
		if err != nil {
			t.Fatalf("shard %d still held: %v", sh, err)
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
