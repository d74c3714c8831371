package routecfg

import (
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/internal/etcdtest"
	"github.com/convoy-im/convoy/router"
)

// The store tests share one etcd; each uses its own cluster name (= key).
func TestStore(t *testing.T) {
	_, cli := etcdtest.Start(t)
	t.Run("InitGetApply", func(t *testing.T) { testStoreRoundTrip(t, cli) })
	t.Run("ConcurrentApply", func(t *testing.T) { testStoreConcurrentApply(t, cli) })
	t.Run("RejectsInvalid", func(t *testing.T) { testStoreRejectsInvalid(t, cli) })
	t.Run("Replace", func(t *testing.T) { testStoreReplace(t, cli) })
	t.Run("BadClusterName", func(t *testing.T) {
		for _, name := range []string{"", "a/b", " x"} {
			if _, err := NewStore(cli, name).Get(etcdtest.Ctx(t)); err == nil {
				t.Errorf("cluster %q: Get succeeded, want an invalid-name error", name)
			}
		}
	})
}

func testStoreRoundTrip(t *testing.T, cli *clientv3.Client) {
	ctx := etcdtest.Ctx(t)
	s := NewStore(cli, "roundtrip")
	if s.Key() != "/convoy/roundtrip/routes" {
		t.Fatalf("Key() = %q", s.Key())
	}
	if _, err := s.Get(ctx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get on empty etcd: err = %v, want ErrNotFound", err)
	}
	doc := etcdtest.Doc(t)
	if err := s.Init(ctx, doc); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if err := s.Init(ctx, doc); !errors.Is(err, ErrExists) {
		t.Fatalf("second Init: err = %v, want ErrExists", err)
	}
	got, err := s.Get(ctx)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	// The writer stamped who stored it: no credentials here, so anonymous.
	if !strings.HasPrefix(got.ChangedBy, "anonymous@") || !strings.HasSuffix(got.ChangedBy, ": routes init") {
		t.Fatalf("ChangedBy = %q, want anonymous@<host>: routes init", got.ChangedBy)
	}
	stamped := doc
	stamped.ChangedBy = got.ChangedBy
	if !reflect.DeepEqual(got, stamped) || got.Version != 1 {
		t.Fatalf("Get = %+v\nwant %+v", got, doc)
	}

	// Move the last database to ds0 and apply the edit.
	edited := got
	edited.Shards[7].Datasource = "ds0"
	v, err := s.Apply(ctx, edited)
	if err != nil || v != 2 {
		t.Fatalf("Apply = %d, %v; want 2, nil", v, err)
	}
	got, err = s.Get(ctx)
	if err != nil || got.Version != 2 || got.Shards[7].Datasource != "ds0" {
		t.Fatalf("after Apply Get = %+v, %v", got, err)
	}

	// Re-applying the doc edited from version 1 must not overwrite version 2.
	stale := edited
	stale.Shards[7].Datasource = "ds1"
	if _, err := s.Apply(ctx, stale); !errors.Is(err, ErrVersionConflict) {
		t.Fatalf("Apply of a version-1 doc over version 2: err = %v, want ErrVersionConflict", err)
	}
	if got, _ := s.Get(ctx); got.Version != 2 || got.Shards[7].Datasource != "ds0" {
		t.Fatalf("a conflicting Apply changed the stored doc: %+v", got)
	}
}

func testStoreConcurrentApply(t *testing.T, cli *clientv3.Client) {
	ctx := etcdtest.Ctx(t)
	s := NewStore(cli, "concurrent")
	if err := s.Init(ctx, etcdtest.Doc(t)); err != nil {
		t.Fatal(err)
	}
	const n = 8
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		errs    = make([]error, n)
		winners []int
		mu      sync.Mutex
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			doc := etcdtest.Doc(t) // version 1, as every applier read it
			doc.Shards[i%8].Database = "im_edit_" + string(rune('a'+i))
			<-start
			_, errs[i] = NewStore(cli, "concurrent").Apply(ctx, doc)
			if errs[i] == nil {
				mu.Lock()
				winners = append(winners, i)
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("%d of %d concurrent Applies on version 1 won (%v), want exactly 1; errors: %v", len(winners), n, winners, errs)
	}
	for i, err := range errs {
		if i != winners[0] && !errors.Is(err, ErrVersionConflict) {
			t.Errorf("loser %d: err = %v, want ErrVersionConflict", i, err)
		}
	}
	got, err := s.Get(ctx)
	w := winners[0]
	if err != nil || got.Version != 2 || got.Shards[w%8].Database != "im_edit_"+string(rune('a'+w)) {
		t.Fatalf("stored doc is not the winner's (%d): %+v, %v", w, got, err)
	}
}

func testStoreRejectsInvalid(t *testing.T, cli *clientv3.Client) {
	ctx := etcdtest.Ctx(t)
	s := NewStore(cli, "invalid")

	missing := etcdtest.Doc(t)
	missing.Shards = missing.Shards[:7] // shards 896..1023 unmapped
	if err := s.Init(ctx, missing); !errors.Is(err, router.ErrInvalidRoutes) {
		t.Fatalf("Init of a doc missing shards: err = %v, want ErrInvalidRoutes", err)
	}
	if _, err := s.Get(ctx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a rejected Init wrote something: Get err = %v", err)
	}

	if err := s.Init(ctx, etcdtest.Doc(t)); err != nil {
		t.Fatal(err)
	}
	before, err := cli.Get(ctx, s.Key())
	if err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*router.Document){
		"unknown datasource": func(d *router.Document) { d.Shards[3].Datasource = "ds9" },
		"missing shard":      func(d *router.Document) { d.Shards = d.Shards[1:] },
	} {
		doc := etcdtest.Doc(t)
		edit(&doc)
		if _, err := s.Apply(ctx, doc); !errors.Is(err, router.ErrInvalidRoutes) {
			t.Errorf("Apply with %s: err = %v, want ErrInvalidRoutes", name, err)
		}
	}
	after, err := cli.Get(ctx, s.Key())
	if err != nil {
		t.Fatal(err)
	}
	if after.Kvs[0].ModRevision != before.Kvs[0].ModRevision {
		t.Fatalf("a rejected Apply wrote the key (mod revision %d -> %d)", before.Kvs[0].ModRevision, after.Kvs[0].ModRevision)
	}
}

func testStoreReplace(t *testing.T, cli *clientv3.Client) {
	ctx := etcdtest.Ctx(t)
	s := NewStore(cli, "replace")
	v, err := s.Replace(ctx, etcdtest.Doc(t))
	if err != nil || v != 1 {
		t.Fatalf("Replace on an empty key = %d, %v; want 1, nil", v, err)
	}
	doc := etcdtest.Doc(t) // version 1 again: Replace must still move forward
	doc.DefaultDatasource = "ds1"
	if v, err = s.Replace(ctx, doc); err != nil || v != 2 {
		t.Fatalf("Replace over version 1 = %d, %v; want 2, nil", v, err)
	}
	if got, _ := s.Get(ctx); got.Version != 2 || got.DefaultDatasource != "ds1" {
		t.Fatalf("after Replace Get = %+v", got)
	}
}
