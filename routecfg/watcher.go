package routecfg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/router"
)

const (
	// DefaultResync is how often the watcher re-reads the document in full,
	// backing up the watch (docs/design.md §2).
	DefaultResync = 30 * time.Second
	// DefaultReadTimeout bounds every read of etcd, the cold-start load
	// included: a proxy must decide quickly whether to serve from its cache
	// file instead of hanging on an unreachable etcd.
	DefaultReadTimeout = 3 * time.Second

	// Backoff between attempts to re-establish a broken watch. The periodic
	// resync keeps confirming the snapshot meanwhile, so the cap only bounds
	// how late a pushed change is seen after etcd comes back.
	minRewatchBackoff = 100 * time.Millisecond
	maxRewatchBackoff = 5 * time.Second
)

// ErrClosed is returned by Start and Reload after Close.
var ErrClosed = errors.New("routecfg: watcher is closed")

// Option configures a Watcher.
type Option func(*config)

type config struct {
	resync      time.Duration
	readTimeout time.Duration
	cacheFile   string
	log         *zap.Logger
	reg         prometheus.Registerer
	onChange    func(*router.Snapshot)
}

// WithResync sets the period of the full re-read that backs up the watch
// (default DefaultResync). Non-positive values keep the default.
func WithResync(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.resync = d
		}
	}
}

// WithReadTimeout bounds each read of etcd, including the initial load in
// Start (default DefaultReadTimeout).
func WithReadTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.readTimeout = d
		}
	}
}

// WithCacheFile keeps a local copy of the last accepted document at path,
// rewritten atomically (temp file + rename, mode 0600) on every accepted
// change. Start falls back to it when etcd is unreachable or has no document.
func WithCacheFile(path string) Option { return func(c *config) { c.cacheFile = path } }

// WithLogger sets the logger (default: none).
func WithLogger(l *zap.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.log = l
		}
	}
}

// WithRegisterer registers the watcher's metrics with r (default: a private
// registry, so tests can create many watchers). Metrics carry a constant
// label cluster=<name>.
func WithRegisterer(r prometheus.Registerer) Option { return func(c *config) { c.reg = r } }

// WithOnChange calls f with each snapshot swapped in after Start (not the
// one Start installs), from the watcher goroutine, after Current() already
// returns it. f must not block for long: the next change waits for it.
// The plan cache is the intended user: clear it when the routes change.
func WithOnChange(f func(*router.Snapshot)) Option { return func(c *config) { c.onChange = f } }

// Watcher keeps the current route snapshot of one cluster: it loads it at
// Start, follows the etcd key with a watch, re-reads it in full every resync
// period, and swaps in each new valid document atomically. Readers call
// Current() on every statement; it never blocks.
type Watcher struct {
	store *Store
	cfg   config
	log   *zap.Logger
	m     *metrics

	cur      atomic.Pointer[router.Snapshot]
	lastSync atomic.Int64 // unix nanoseconds of the last confirmation, 0 = never
	stale    atomic.Bool  // mirrors convoy_route_stale
	// staleSince is when the snapshot stopped being confirmed (unix ns),
	// for the outage time logged when etcd confirms it again.
	staleSince atomic.Int64

	started  atomic.Bool
	ctx      context.Context // canceled by Close; owns the goroutine
	cancel   context.CancelFunc
	reloads  chan reloadReq
	done     chan struct{}
	doneOnce sync.Once

	// Owned by Start, then by the goroutine (the go statement orders them).
	rejectedRev int64 // ModRevision of the last rejected value: count it once
	olderRev    int64 // ModRevision of the last older value: warn once
}

type reloadReq struct {
	ctx  context.Context
	errc chan error
}

// NewWatcher returns a watcher over store; call Start to load and follow.
func NewWatcher(store *Store, opts ...Option) *Watcher {
	cfg := config{resync: DefaultResync, readTimeout: DefaultReadTimeout, log: zap.NewNop()}
	for _, o := range opts {
		o(&cfg)
	}
	w := &Watcher{
		store:   store,
		cfg:     cfg,
		log:     cfg.log.With(zap.String("cluster", store.cluster), zap.String("key", store.key)),
		reloads: make(chan reloadReq),
		done:    make(chan struct{}),
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.m = newMetrics(cfg.reg, store.cluster, w.lastSync.Load, w.log)
	return w
}

// Current returns the snapshot in use. It is never nil after Start returned
// nil, and the returned snapshot is immutable: keep using it for the whole
// statement even if a newer one is swapped in meanwhile.
func (w *Watcher) Current() *router.Snapshot { return w.cur.Load() }

// Stale reports whether the served snapshot is not confirmed by etcd now
// (convoy_route_stale).
func (w *Watcher) Stale() bool { return w.stale.Load() }

// Done is closed when the watcher goroutine has exited (after Close, or
// after a failed Start).
func (w *Watcher) Done() <-chan struct{} { return w.done }

// Close stops the watcher goroutine and waits for it. Current() keeps
// returning the last snapshot. Close is idempotent.
func (w *Watcher) Close() {
	w.cancel()
	if w.started.CompareAndSwap(false, true) {
		w.closeDone() // never started: make a later Start fail
		return
	}
	<-w.done
}

func (w *Watcher) closeDone() { w.doneOnce.Do(func() { close(w.done) }) }

// Start loads the document from etcd, bounded by the read timeout. If etcd is
// unreachable, has no document or holds an invalid one, it serves the cache
// file instead (logged, and convoy_route_stale is 1 until etcd confirms); if
// that is missing too, it returns an error: a proxy with no routes must not
// serve. On success it starts the goroutine that follows etcd until Close.
// ctx bounds only the initial load.
func (w *Watcher) Start(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		if w.ctx.Err() != nil {
			return ErrClosed
		}
		return errors.New("routecfg: watcher already started")
	}
	rev, etcdErr := w.initialLoad(ctx)
	if w.cur.Load() == nil {
		err := w.loadCache(etcdErr)
		if err != nil {
			w.closeDone()
			return err
		}
	}
	go w.run(rev)
	return nil
}

// initialLoad reads etcd once. It returns the read's store revision (0 when
// etcd did not answer) and why no snapshot was installed, if none was.
func (w *Watcher) initialLoad(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.readTimeout)
	defer cancel()
	st, err := w.store.read(ctx)
	if err != nil {
		return 0, err
	}
	return st.revision, w.consider(st, "initial load", false)
}

func (w *Watcher) loadCache(etcdErr error) error {
	if w.cfg.cacheFile == "" {
		return fmt.Errorf("routecfg: refusing to start without routes: etcd gave no usable route document (%v) and no cache file is configured", etcdErr)
	}
	b, err := os.ReadFile(w.cfg.cacheFile)
	if err != nil {
		return fmt.Errorf("routecfg: refusing to start without routes: etcd gave no usable route document (%v) and the cache file is unusable: %v", etcdErr, err)
	}
	doc, err := DecodeDocument(b)
	var snap *router.Snapshot
	if err == nil {
		snap, err = router.NewSnapshot(doc)
	}
	if err != nil {
		return fmt.Errorf("routecfg: refusing to start without routes: etcd gave no usable route document (%v) and the cache file %s is invalid: %v", etcdErr, w.cfg.cacheFile, err)
	}
	w.cur.Store(snap)
	w.m.version.Set(float64(snap.Version()))
	w.m.reloads.Inc()
	w.setStale()
	// The file was written when a proxy last accepted this document from
	// etcd: its time is the best "last confirmed" we have.
	if fi, err := os.Stat(w.cfg.cacheFile); err == nil {
		w.lastSync.Store(fi.ModTime().UnixNano())
		w.m.lastSync.Set(float64(fi.ModTime().UnixNano()) / 1e9)
	}
	w.log.Warn("serving routes from the cache file: etcd gave no usable route document; will switch to etcd as soon as it answers",
		zap.String("cache_file", w.cfg.cacheFile), zap.Int64("version", snap.Version()), zap.NamedError("etcd_error", etcdErr))
	return nil
}

// Reload re-reads the document from etcd now and swaps it in if it is newer
// and valid. It returns the read error, or the validation error of a
// rejected document (wrapping router.ErrInvalidRoutes). The work happens on
// the watcher goroutine, so it is ordered with watch events.
func (w *Watcher) Reload(ctx context.Context) error {
	if !w.started.Load() {
		return errors.New("routecfg: watcher not started")
	}
	req := reloadReq{ctx: ctx, errc: make(chan error, 1)}
	select {
	case w.reloads <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-w.done:
		return ErrClosed
	}
	select {
	case err := <-req.errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-w.done:
		return ErrClosed
	}
}

// run follows etcd until Close. rev is the store revision the snapshot was
// read at (0: not read from etcd yet), so the watch starts right after it and
// misses nothing.
func (w *Watcher) run(rev int64) {
	defer w.closeDone()
	ticker := time.NewTicker(w.cfg.resync)
	defer ticker.Stop()

	var (
		wch     clientv3.WatchChan
		pending chan clientv3.WatchChan // receives wch once the watch is created
		wcancel = context.CancelFunc(func() {})
		watchWG sync.WaitGroup
		retry   <-chan time.Time
		backoff = minRewatchBackoff
	)
	defer watchWG.Wait()
	defer func() { wcancel() }()

	// establish (re)starts the watch, reading the key first when the
	// revision to continue from is unknown; on failure it schedules a retry.
	establish := func() {
		if rev == 0 {
			r, _ := w.resync(w.ctx, "rewatch")
			if r == 0 {
				retry = time.After(backoff)
				backoff = min(2*backoff, maxRewatchBackoff)
				return
			}
			rev = r
		}
		var wctx context.Context
		// WithRequireLeader: a member cut off from its cluster cancels
		// the watch instead of going silently quiet.
		wctx, wcancel = context.WithCancel(clientv3.WithRequireLeader(w.ctx))
		// clientv3's Watch blocks until the server has created the watch,
		// which is forever while etcd is down; the loop must keep serving
		// resyncs, reloads and Close meanwhile, so create it aside.
		p, from := make(chan clientv3.WatchChan, 1), rev+1
		pending = p
		watchWG.Add(1)
		go func() {
			defer watchWG.Done()
			p <- w.store.cli.Watch(wctx, w.store.key, clientv3.WithRev(from))
		}()
	}
	establish()

	for {
		select {
		case <-w.ctx.Done():
			return
		case ch := <-pending:
			pending, wch = nil, ch
		case resp, ok := <-wch:
			if !ok || resp.Canceled || resp.CompactRevision != 0 || resp.Err() != nil {
				// Closed, canceled or compacted past our revision: events
				// may be lost, so re-read in full and watch again.
				w.log.Warn("route watch broken; re-reading and re-watching",
					zap.Bool("closed", !ok), zap.Int64("compact_revision", resp.CompactRevision), zap.Error(resp.Err()))
				wcancel()
				wch, pending, rev = nil, nil, 0
				retry = time.After(backoff)
				backoff = min(2*backoff, maxRewatchBackoff)
				continue
			}
			backoff = minRewatchBackoff
			for _, ev := range resp.Events {
				w.handleEvent(ev)
			}
		case <-ticker.C:
			_, _ = w.resync(w.ctx, "resync")
		case <-retry:
			retry = nil
			establish()
		case req := <-w.reloads:
			_, err := w.resync(req.ctx, "reload")
			req.errc <- err
		}
	}
}

func (w *Watcher) handleEvent(ev *clientv3.Event) {
	switch ev.Type {
	case clientv3.EventTypePut:
		doc, err := DecodeDocument(ev.Kv.Value)
		st := stored{doc: doc, decodeErr: err, modRevision: ev.Kv.ModRevision, revision: ev.Kv.ModRevision}
		_ = w.consider(st, "watch", true)
	case clientv3.EventTypeDelete:
		w.setStale()
		w.log.Error("route document deleted from etcd; keeping the last snapshot",
			zap.Int64("serving_version", w.cur.Load().Version()))
	}
}

// resync reads the key in full and considers what it finds. It returns the
// read's store revision (0 if etcd did not answer) and what went wrong.
func (w *Watcher) resync(ctx context.Context, source string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.readTimeout)
	defer cancel()
	defer context.AfterFunc(w.ctx, cancel)() // Close interrupts a slow read
	if w.stale.Load() {
		// gRPC backs off reconnects up to minutes while etcd is down; a
		// resync is the moment we want to know, so reconnect now.
		if conn := w.store.cli.ActiveConnection(); conn != nil {
			conn.ResetConnectBackoff()
		}
	}
	st, err := w.store.read(ctx)
	if err != nil {
		if !w.stale.Load() {
			w.log.Warn("etcd lost: cannot read routes; serving the last snapshot until it answers",
				zap.String("source", source), zap.Int64("serving_version", w.cur.Load().Version()), zap.Error(err))
		}
		w.setStale()
		return 0, err
	}
	return st.revision, w.consider(st, source, true)
}

// consider decides what to do with one read of the key: swap in a newer
// valid document, confirm an equal version, ignore an older one, or reject an
// invalid one. notify is false only for the snapshot Start installs.
func (w *Watcher) consider(st stored, source string, notify bool) error {
	if st.modRevision == 0 {
		if !w.stale.Load() {
			w.log.Error("etcd holds no route document; serving the last snapshot", zap.String("source", source))
		}
		w.setStale()
		return fmt.Errorf("routecfg: %w for cluster %q (key %s)", ErrNotFound, w.store.cluster, w.store.key)
	}
	if st.decodeErr != nil {
		return w.reject(st.modRevision, st.decodeErr, source)
	}
	cur := w.cur.Load()
	if cur != nil && st.doc.Version < cur.Version() {
		// Linearizable reads in one goroutine never go backwards, so an
		// older version means the key was deleted and re-created, or
		// written by hand. Serving it could undo a shard move.
		w.setStale()
		if st.modRevision != w.olderRev {
			w.olderRev = st.modRevision
			w.log.Error("etcd holds an older route version than the one served; ignoring it (a re-created document must continue the version sequence: use `routes init --force`)",
				zap.String("source", source), zap.Int64("etcd_version", st.doc.Version), zap.Int64("serving_version", cur.Version()))
		}
		return fmt.Errorf("routecfg: etcd holds route version %d, older than the served version %d; ignored", st.doc.Version, cur.Version())
	}
	if cur != nil && st.doc.Version == cur.Version() {
		w.confirm()
		return nil
	}
	snap, err := router.NewSnapshot(st.doc)
	if err != nil {
		return w.reject(st.modRevision, fmt.Errorf("routecfg: route version %d rejected: %w", st.doc.Version, err), source)
	}
	w.cur.Store(snap)
	w.m.version.Set(float64(snap.Version()))
	w.m.reloads.Inc()
	w.confirm()
	prev := int64(0)
	if cur != nil {
		prev = cur.Version()
	}
	w.log.Info("route snapshot swapped in", zap.String("source", source),
		zap.Int64("from_version", prev), zap.Int64("to_version", snap.Version()), zap.String("changed_by", st.doc.ChangedBy))
	w.writeCache(st.doc)
	if notify && w.cfg.onChange != nil {
		w.cfg.onChange(snap)
	}
	return nil
}

// reject counts and logs an invalid value once per etcd write (resyncs keep
// reading the same bad value until someone fixes it) and marks the snapshot
// unconfirmed.
func (w *Watcher) reject(modRevision int64, err error, source string) error {
	w.setStale()
	if modRevision != w.rejectedRev {
		w.rejectedRev = modRevision
		w.m.rejected.Inc()
		serving := int64(0)
		if cur := w.cur.Load(); cur != nil {
			serving = cur.Version()
		}
		w.log.Error("route document rejected; the last good snapshot keeps serving",
			zap.String("source", source), zap.Int64("etcd_mod_revision", modRevision),
			zap.Int64("serving_version", serving), zap.Error(err))
	}
	return err
}

// confirm records that the served snapshot is what etcd holds.
func (w *Watcher) confirm() {
	now := time.Now()
	w.lastSync.Store(now.UnixNano())
	w.m.lastSync.Set(float64(now.UnixNano()) / 1e9)
	w.m.stale.Set(0)
	if w.stale.Swap(false) {
		w.log.Info("etcd regained: routes confirmed by etcd again", zap.Int64("version", w.cur.Load().Version()),
			zap.Duration("stale_for", now.Sub(time.Unix(0, w.staleSince.Load()))))
	}
}

func (w *Watcher) setStale() {
	if !w.stale.Swap(true) {
		w.staleSince.Store(time.Now().UnixNano())
	}
	w.m.stale.Set(1)
}

// writeCache replaces the cache file atomically: a crash mid-write leaves the
// previous good copy, never a torn one that would refuse a cold start.
func (w *Watcher) writeCache(doc router.Document) {
	path := w.cfg.cacheFile
	if path == "" {
		return
	}
	if err := writeFileAtomic(path, doc); err != nil {
		w.log.Error("cannot write the route cache file", zap.String("cache_file", path), zap.Error(err))
	}
}

func writeFileAtomic(path string, doc router.Document) (err error) {
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(0o600); err != nil {
		return err
	}
	if _, err = f.Write(append(b, '\n')); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
