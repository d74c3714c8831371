package routecfg

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/convoy-im/convoy/internal/etcdtest"
	"github.com/convoy-im/convoy/router"
)

func startWatcher(t *testing.T, s *Store, opts ...Option) *Watcher {
	t.Helper()
	w := NewWatcher(s, append([]Option{WithLogger(etcdtest.Logger(t))}, opts...)...)
	if err := w.Start(etcdtest.Ctx(t)); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(w.Close)
	return w
}

func readCacheFile(t *testing.T, path string) router.Document {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("cache file: %v", err)
	}
	var doc router.Document
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("cache file %s: %v", path, err)
	}
	return doc
}

func TestWatcherFollowsEtcd(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := etcdtest.Ctx(t)
	s := NewStore(cli, "follow")
	if err := s.Init(ctx, etcdtest.Doc(t)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cache := filepath.Join(t.TempDir(), "routes.json")
	changes := make(chan int64, 10)
	w := startWatcher(t, s, WithRegisterer(reg), WithCacheFile(cache),
		WithOnChange(func(sn *router.Snapshot) { changes <- sn.Version() }))

	if v := w.Current().Version(); v != 1 {
		t.Fatalf("after Start Current().Version() = %d, want 1", v)
	}
	if got := etcdtest.Metric(t, reg, MetricVersion); got != 1 {
		t.Errorf("%s = %v, want 1", MetricVersion, got)
	}
	if got := etcdtest.Metric(t, reg, MetricStale); got != 0 {
		t.Errorf("%s = %v, want 0", MetricStale, got)
	}
	if got := etcdtest.Metric(t, reg, MetricLastSync); time.Since(time.Unix(int64(got), 0)) > time.Minute {
		t.Errorf("%s = %v, want about now", MetricLastSync, got)
	}
	if got := etcdtest.Metric(t, reg, MetricStaleness); got < 0 || got > 60 {
		t.Errorf("%s = %v, want a few seconds at most", MetricStaleness, got)
	}
	if v := readCacheFile(t, cache).Version; v != 1 {
		t.Errorf("cache file holds version %d, want 1", v)
	}

	// A change applied through the store reaches the watcher.
	doc := etcdtest.Doc(t)
	doc.Shards[7].Datasource = "ds0"
	if _, err := s.Apply(ctx, doc); err != nil {
		t.Fatal(err)
	}
	etcdtest.Eventually(t, 5*time.Second, "the watcher did not see version 2", func() bool { return w.Current().Version() == 2 })
	if w.Current().Target(1000).Datasource != "ds0" {
		t.Errorf("version 2 is swapped in but shard 1000 still routes to %s", w.Current().Target(1000).Datasource)
	}
	select {
	case v := <-changes:
		if v != 2 {
			t.Errorf("OnChange got version %d, want 2", v)
		}
	case <-time.After(2 * time.Second):
		t.Error("OnChange was not called for version 2")
	}
	if v := readCacheFile(t, cache).Version; v != 2 {
		t.Errorf("cache file holds version %d, want 2", v)
	}
	if fi, err := os.Stat(cache); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("cache file mode = %v, %v; want 0600", fi.Mode(), err)
	}
	if got := etcdtest.Metric(t, reg, MetricReloads); got != 2 {
		t.Errorf("%s = %v, want 2 (initial load + one change)", MetricReloads, got)
	}

	// An invalid document written behind the Store's back is refused.
	bad := etcdtest.Doc(t)
	bad.Version = 3
	bad.Shards = bad.Shards[:7]
	raw, _ := json.Marshal(bad)
	if _, err := cli.Put(ctx, s.Key(), string(raw)); err != nil {
		t.Fatal(err)
	}
	etcdtest.Eventually(t, 5*time.Second, "the invalid document was not counted as rejected",
		func() bool { return etcdtest.Metric(t, reg, MetricRejected) == 1 })
	if v := w.Current().Version(); v != 2 {
		t.Fatalf("after an invalid version 3, Current().Version() = %d, want 2 (last good)", v)
	}
	// Re-reading the same bad value reports it again but counts it once.
	if err := w.Reload(ctx); !errors.Is(err, router.ErrInvalidRoutes) {
		t.Errorf("Reload over an invalid document: err = %v, want ErrInvalidRoutes", err)
	}
	if got := etcdtest.Metric(t, reg, MetricRejected); got != 1 {
		t.Errorf("%s = %v after a Reload of the same bad value, want 1", MetricRejected, got)
	}
	if v := readCacheFile(t, cache).Version; v != 2 {
		t.Errorf("cache file holds version %d after a rejected doc, want 2", v)
	}

	// An older version (a hand-made re-creation) is ignored.
	older := etcdtest.Doc(t) // version 1, valid
	raw, _ = json.Marshal(older)
	if _, err := cli.Put(ctx, s.Key(), string(raw)); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(ctx); err == nil || !strings.Contains(err.Error(), "older") {
		t.Errorf("Reload over an older version: err = %v, want an 'older version' error", err)
	}
	if v := w.Current().Version(); v != 2 {
		t.Fatalf("after an older version 1, Current().Version() = %d, want 2", v)
	}

	// init --force continues the sequence, so the watcher takes it.
	fixed := etcdtest.Doc(t)
	fixed.DefaultDatasource = "ds1"
	if v, err := s.Replace(ctx, fixed); err != nil || v != 2 {
		t.Fatalf("Replace = %d, %v; want 2 (after stored version 1)", v, err)
	}
	fixed.Version = 2
	if v, err := s.Apply(ctx, fixed); err != nil || v != 3 {
		t.Fatalf("Apply = %d, %v; want 3", v, err)
	}
	etcdtest.Eventually(t, 5*time.Second, "the watcher did not take version 3", func() bool { return w.Current().Version() == 3 })
	if got := etcdtest.Metric(t, reg, MetricStale); got != 0 {
		t.Errorf("%s = %v after a good version 3, want 0", MetricStale, got)
	}
	if got := w.Current().DefaultDatasource(); got != "ds1" {
		t.Errorf("default datasource = %s, want ds1", got)
	}

	w.Close()
	select {
	case <-w.Done():
	default:
		t.Fatal("Done() not closed after Close")
	}
	if err := w.Reload(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Reload after Close: err = %v, want ErrClosed", err)
	}
}

func TestWatcherSurvivesEtcdRestart(t *testing.T) {
	e, cli := etcdtest.Start(t)
	ctx := etcdtest.Ctx(t)
	s := NewStore(cli, "restart")
	if err := s.Init(ctx, etcdtest.Doc(t)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zap.InfoLevel)
	w := startWatcher(t, s, WithRegisterer(reg), WithResync(200*time.Millisecond), WithReadTimeout(500*time.Millisecond),
		WithLogger(zap.New(core)))

	e.Stop()
	etcdtest.Eventually(t, 5*time.Second, MetricStale+" did not become 1 with etcd down",
		func() bool { return etcdtest.Metric(t, reg, MetricStale) == 1 })
	if cur := w.Current(); cur == nil || cur.Version() != 1 {
		t.Fatalf("with etcd down Current() = %v, want the last snapshot (version 1)", cur)
	}
	staleness := etcdtest.Metric(t, reg, MetricStaleness)

	e.Start()
	etcdtest.Eventually(t, 10*time.Second, MetricStale+" did not return to 0 after etcd restarted",
		func() bool { return etcdtest.Metric(t, reg, MetricStale) == 0 })
	if got := etcdtest.Metric(t, reg, MetricStaleness); got > staleness+1 {
		t.Errorf("%s = %v after resync, want it reset (was %v while down)", MetricStaleness, got, staleness)
	}
	// One line when etcd was lost, one when it was regained, with the time
	// the routes went unconfirmed.
	lost, back := logs.FilterMessageSnippet("etcd lost").All(), logs.FilterMessageSnippet("etcd regained").All()
	if len(lost) != 1 || len(back) != 1 {
		t.Errorf("etcd lost / regained lines: %d / %d, want 1 / 1: %v", len(lost), len(back), logs.All())
	} else if d, _ := back[0].ContextMap()["stale_for"].(time.Duration); d <= 0 || d > time.Minute {
		t.Errorf("etcd regained: stale_for %v", back[0].ContextMap()["stale_for"])
	}
	doc := etcdtest.Doc(t)
	doc.DefaultDatasource = "ds1"
	if _, err := s.Apply(ctx, doc); err != nil {
		t.Fatalf("Apply after restart: %v", err)
	}
	etcdtest.Eventually(t, 5*time.Second, "the change applied after the restart was not picked up",
		func() bool { return w.Current().Version() == 2 })
}

func TestWatcherColdStart(t *testing.T) {
	down := NewStore(etcdtest.Client(t, etcdtest.DeadEndpoint(t)), "cold")
	fast := WithReadTimeout(300 * time.Millisecond)

	t.Run("CacheFile", func(t *testing.T) {
		cache := filepath.Join(t.TempDir(), "routes.json")
		doc := etcdtest.Doc(t)
		doc.Version = 7
		if err := writeFileAtomic(cache, doc); err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		w := startWatcher(t, down, fast, WithCacheFile(cache), WithRegisterer(reg))
		if v := w.Current().Version(); v != 7 {
			t.Fatalf("cold start from the cache: version %d, want 7", v)
		}
		if got := etcdtest.Metric(t, reg, MetricStale); got != 1 {
			t.Errorf("%s = %v while serving the cache with etcd down, want 1", MetricStale, got)
		}
	})
	t.Run("NoCache", func(t *testing.T) {
		for name, opts := range map[string][]Option{
			"no cache configured": {fast},
			"cache file missing":  {fast, WithCacheFile(filepath.Join(t.TempDir(), "absent.json"))},
		} {
			w := NewWatcher(down, append(opts, WithLogger(etcdtest.Logger(t)))...)
			err := w.Start(etcdtest.Ctx(t))
			if err == nil {
				w.Close()
				t.Fatalf("%s: Start succeeded with etcd down and no cache; a proxy without routes must not serve", name)
			}
			if !strings.Contains(err.Error(), "refusing to start") {
				t.Errorf("%s: Start error %q does not say it refuses to start", name, err)
			}
			if w.Current() != nil {
				t.Errorf("%s: Current() = %v after a failed Start, want nil", name, w.Current())
			}
			select {
			case <-w.Done():
			default:
				t.Errorf("%s: Done() not closed after a failed Start", name)
			}
			w.Close()
		}
	})
	t.Run("NoDocumentInEtcd", func(t *testing.T) {
		_, cli := etcdtest.Start(t)
		s := NewStore(cli, "empty")
		if err := NewWatcher(s).Start(etcdtest.Ctx(t)); err == nil || !strings.Contains(err.Error(), "no route document") {
			t.Fatalf("Start with an empty etcd and no cache: err = %v, want a no-document error", err)
		}
		// With a cache it serves the cache, then switches to etcd once a
		// newer document appears there.
		cache := filepath.Join(t.TempDir(), "routes.json")
		if err := writeFileAtomic(cache, etcdtest.Doc(t)); err != nil {
			t.Fatal(err)
		}
		w := startWatcher(t, s, WithCacheFile(cache))
		if v := w.Current().Version(); v != 1 {
			t.Fatalf("version %d, want 1 from the cache", v)
		}
		doc := etcdtest.Doc(t)
		doc.Version = 5
		if err := s.Init(etcdtest.Ctx(t), doc); err != nil {
			t.Fatal(err)
		}
		etcdtest.Eventually(t, 5*time.Second, "the watcher did not switch to etcd's version 5",
			func() bool { return w.Current().Version() == 5 })
		etcdtest.Eventually(t, 2*time.Second, "the cache file was not rewritten with version 5",
			func() bool { return readCacheFile(t, cache).Version == 5 })
	})
}

// Several watchers on one registry (or on the default private ones) must not
// panic on duplicate registration.
func TestWatcherMetricsRegistration(t *testing.T) {
	s := NewStore(etcdtest.Client(t, etcdtest.DeadEndpoint(t)), "dup")
	reg := prometheus.NewRegistry()
	for i := 0; i < 2; i++ {
		NewWatcher(s, WithRegisterer(reg), WithLogger(etcdtest.Logger(t))).Close()
		NewWatcher(s).Close()
	}
	if got := etcdtest.Metric(t, reg, MetricVersion); got != 0 {
		t.Errorf("%s = %v before any load, want 0", MetricVersion, got)
	}
}
