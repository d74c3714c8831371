package migrate

import (
	"reflect"
	"testing"

	"github.com/convoy-im/convoy/router"
)

// moveShard cuts the shard's range around it and a move back restores the
// document's ranges exactly, for per-shard tables and for shared ones.
func TestMoveShard(t *testing.T) {
	dss := []router.Datasource{{Name: "ds0", Addr: "a:1"}, {Name: "ds1", Addr: "b:1"}, {Name: "ds2", Addr: "c:1"}}
	own, err := router.DefaultLayout(dss[:2], 8)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := router.SharedLayout(dss[:2], 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	own.Datasources, shared.Datasources = dss, dss
	zero := 0
	for _, c := range []struct {
		name  string
		doc   router.Document
		shard int
		table *int
		want  router.Target
		cut   int // ranges after the move
	}{
		{"own tables, middle of a range", own, 441, nil, router.Target{Datasource: "ds2", Database: "im_9", Table: 441}, 10},
		{"own tables, first of a range", own, 384, nil, router.Target{Datasource: "ds2", Database: "im_9", Table: 384}, 9},
		{"own tables, last shard", own, 1023, nil, router.Target{Datasource: "ds2", Database: "im_9", Table: 1023}, 9},
		{"shared table", shared, 5, &zero, router.Target{Datasource: "ds2", Database: "im_9", Table: 0}, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			orig, err := router.NewSnapshot(c.doc)
			if err != nil {
				t.Fatal(err)
			}
			moved := moveShard(c.doc, c.shard, "ds2", "im_9", c.table)
			snap, err := router.NewSnapshot(moved)
			if err != nil {
				t.Fatalf("moved document invalid: %v", err)
			}
			for sh := 0; sh < router.NumShards; sh++ {
				want := orig.Target(router.Shard(sh))
				if sh == c.shard {
					want = c.want
				}
				if got := snap.Target(router.Shard(sh)); got != want {
					t.Fatalf("shard %d: %+v, want %+v", sh, got, want)
				}
			}
			if len(moved.Shards) != c.cut {
				t.Errorf("%d ranges after the move, want %d: %+v", len(moved.Shards), c.cut, moved.Shards)
			}
			from := orig.Target(router.Shard(c.shard))
			back := moveShard(moved, c.shard, from.Datasource, from.Database, c.table)
			if !reflect.DeepEqual(back.Shards, c.doc.Shards) {
				t.Fatalf("moved back: %+v\nwant %+v", back.Shards, c.doc.Shards)
			}
		})
	}
}
