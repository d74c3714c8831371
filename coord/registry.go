package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/routecfg"
)

// Proxy registry
//
// Every live Convoy instance keeps one key, /convoy/<cluster>/proxies/<id>,
// attached to an etcd lease that it keeps alive. The key disappears when
// the process dies (the lease expires after its TTL), when Close revokes the
// lease, or when etcd has not heard from the proxy for a TTL. SHOW PROXIES
// lists the keys. If the lease is lost while the process lives (etcd down
// for longer than the TTL, or a network partition), the registration is
// recreated with a new lease in the background as soon as etcd answers
// again, with a backoff of 100 ms to 5 s between attempts.

const (
	// DefaultRegistryTTL is the lease TTL: how long a dead proxy stays
	// listed.
	DefaultRegistryTTL = 10 * time.Second
	// routeVersionMinInterval bounds how often SetRouteVersion writes to
	// etcd: a burst of route changes costs at most one write per interval.
	routeVersionMinInterval = time.Second
	// registerTimeout bounds Register when ctx has no earlier deadline, and
	// each background attempt to re-register.
	registerTimeout      = 3 * time.Second
	minReregisterBackoff = 100 * time.Millisecond
	maxReregisterBackoff = 5 * time.Second
)

// ProxiesPrefix is the etcd prefix under which a cluster's proxies register.
func ProxiesPrefix(cluster string) string { return "/convoy/" + cluster + "/proxies/" }

// ProxyKey is the etcd key of one proxy's registration.
func ProxyKey(cluster, id string) string { return ProxiesPrefix(cluster) + id }

// ProxyInfo describes one running Convoy instance.
type ProxyInfo struct {
	ID      string // unique per live instance in the cluster (e.g. hostname:port)
	Listen  string // MySQL protocol listen address
	Metrics string // metrics/pprof listen address
	Version string // Convoy build version
	// StartedAt is when the process started; stored with second precision.
	StartedAt time.Time
	// RouteVersion is the route document version the proxy serves.
	RouteVersion int64
}

// proxyRecord is the JSON stored in etcd.
type proxyRecord struct {
	ID           string `json:"id"`
	Listen       string `json:"listen"`
	Metrics      string `json:"metrics"`
	Version      string `json:"version"`
	StartedAt    string `json:"started_at"` // RFC3339, UTC
	RouteVersion int64  `json:"route_version"`
}

func encodeProxy(p ProxyInfo) string {
	b, _ := json.Marshal(proxyRecord{
		ID: p.ID, Listen: p.Listen, Metrics: p.Metrics, Version: p.Version,
		StartedAt: p.StartedAt.UTC().Format(time.RFC3339), RouteVersion: p.RouteVersion,
	})
	return string(b)
}

func decodeProxy(b []byte) (ProxyInfo, error) {
	var r proxyRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return ProxyInfo{}, err
	}
	p := ProxyInfo{ID: r.ID, Listen: r.Listen, Metrics: r.Metrics, Version: r.Version, RouteVersion: r.RouteVersion}
	if r.StartedAt != "" {
		t, err := time.Parse(time.RFC3339, r.StartedAt)
		if err != nil {
			return ProxyInfo{}, fmt.Errorf("started_at: %w", err)
		}
		p.StartedAt = t
	}
	return p, nil
}

// validKeyPart rejects names that would alias another key: empty, with a
// '/', NUL or surrounding spaces.
func validKeyPart(what, s string) error {
	if s == "" || strings.ContainsAny(s, "/\x00") || strings.TrimSpace(s) != s {
		return fmt.Errorf("coord: invalid %s %q (it must be non-empty, without '/' or surrounding spaces)", what, s)
	}
	return nil
}

// RegistryOption configures Register.
type RegistryOption func(*registryConfig)

type registryConfig struct {
	ttl time.Duration
	log *zap.Logger
}

// WithTTL sets the lease TTL (default DefaultRegistryTTL), rounded up to
// whole seconds. etcd enforces a minimum (about 2 s with default election
// settings) and may grant more than asked.
func WithTTL(d time.Duration) RegistryOption {
	return func(c *registryConfig) {
		if d > 0 {
			c.ttl = d
		}
	}
}

// WithRegistryLogger sets the logger (default: none).
func WithRegistryLogger(l *zap.Logger) RegistryOption {
	return func(c *registryConfig) {
		if l != nil {
			c.log = l
		}
	}
}

// Registration is one proxy's live entry in the registry.
type Registration struct {
	cli *clientv3.Client
	key string
	ttl int64 // seconds
	log *zap.Logger

	mu    sync.Mutex // guards info and lease
	info  ProxyInfo
	lease clientv3.LeaseID

	routeVersion atomic.Int64
	changed      chan struct{} // SetRouteVersion -> run, capacity 1
	losses       atomic.Int64  // leases lost so far (each one re-registered)
	// renewedAt is a time etcd (re)started the lease's TTL after, as far
	// as we can tell (unix ns): the send time of the grant or of the last
	// answered renewal. See validUntil.
	renewedAt atomic.Int64

	ctx       context.Context // canceled by Close
	cancel    context.CancelFunc
	done      chan struct{} // closed when run exits
	closeOnce sync.Once
	closeErr  error
}

// Register writes info under /convoy/<cluster>/proxies/<info.ID> with a
// lease, and keeps the lease alive until Close. A zero StartedAt means now.
// If etcd does not answer, it returns an error once ctx is done or after
// 3 s, whichever is first: the caller decides whether to serve without
// being listed. A key left by a previous process with the same ID (killed
// less than a TTL ago) is taken over, with a warning.
func Register(ctx context.Context, cli *clientv3.Client, cluster string, info ProxyInfo, opts ...RegistryOption) (*Registration, error) {
	if err := validKeyPart("cluster name", cluster); err != nil {
		return nil, err
	}
	if err := validKeyPart("proxy id", info.ID); err != nil {
		return nil, err
	}
	cfg := registryConfig{ttl: DefaultRegistryTTL, log: zap.NewNop()}
	for _, o := range opts {
		o(&cfg)
	}
	if info.StartedAt.IsZero() {
		info.StartedAt = time.Now()
	}
	info.StartedAt = info.StartedAt.UTC().Truncate(time.Second)
	key := ProxyKey(cluster, info.ID)
	r := &Registration{
		cli:     cli,
		key:     key,
		ttl:     int64((cfg.ttl + time.Second - 1) / time.Second),
		log:     cfg.log.With(zap.String("cluster", cluster), zap.String("key", key)),
		info:    info,
		changed: make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	r.routeVersion.Store(info.RouteVersion)
	r.ctx, r.cancel = context.WithCancel(context.Background())

	actx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	lost, written, err := r.establish(actx)
	if err != nil {
		r.cancel()
		close(r.done)
		return nil, fmt.Errorf("coord: cannot register proxy %q in etcd (%s): %w", info.ID, key, err)
	}
	r.log.Info("proxy registered", zap.Int64("ttl_seconds", r.ttl), zap.String("lease", leaseHex(r.leaseID())))
	go r.run(lost, written)
	return r, nil
}

func leaseHex(id clientv3.LeaseID) string { return fmt.Sprintf("%x", int64(id)) }

func (r *Registration) leaseID() clientv3.LeaseID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lease
}

// value is the JSON to store now, with the latest route version, and that
// version.
func (r *Registration) value() (string, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.info.RouteVersion = r.routeVersion.Load()
	return encodeProxy(r.info), r.info.RouteVersion
}

// establish grants a new lease, writes the key with it and starts keeping
// it alive. ctx bounds the grant and the write; the keepalive lives until
// Close or until the lease is lost, when the returned channel closes. It
// returns the route version written.
func (r *Registration) establish(ctx context.Context) (<-chan struct{}, int64, error) {
	sent := time.Now()
	grant, err := r.cli.Grant(ctx, r.ttl)
	if err != nil {
		return nil, 0, fmt.Errorf("grant lease: %w", err)
	}
	val, version := r.value()
	resp, err := r.cli.Put(ctx, r.key, val, clientv3.WithLease(grant.ID), clientv3.WithPrevKV())
	if err != nil {
		_ = r.revoke(grant.ID)
		return nil, 0, fmt.Errorf("write %s: %w", r.key, err)
	}
	r.mu.Lock()
	old := r.lease
	r.lease = grant.ID
	r.mu.Unlock()
	r.renewedAt.Store(sent.UnixNano())
	lost := make(chan struct{})
	go r.keepAlive(grant.ID, lost)
	if prev := resp.PrevKv; prev != nil && prev.Lease != int64(old) {
		// Not our own previous lease: a process with the same ID died less
		// than a TTL ago, or two live proxies share an ID (a configuration
		// error: they would keep overwriting each other).
		r.log.Warn("took over an existing registration with the same proxy id (a previous process not yet expired, or a duplicate id)",
			zap.String("previous_lease", leaseHex(clientv3.LeaseID(prev.Lease))), zap.ByteString("previous_value", prev.Value))
	}
	return lost, version, nil
}

// keepAlive renews lease id every third of the TTL (more often while etcd
// does not answer) until Close, and closes lost once the lease is gone:
// etcd says so, or no renewal succeeded for a whole TTL. It does not use
// the client's KeepAlive stream, which stamps nothing: a renewal counts
// from when its request was sent, a time etcd's TTL certainly restarted
// after. Counted from the answer's arrival, a proxy paused with an answer
// in its socket (a long GC pause, SIGSTOP) would resume believing in a
// lease etcd had long expired, and serve as if registered.
func (r *Registration) keepAlive(id clientv3.LeaseID, lost chan<- struct{}) {
	defer close(lost)
	ttl := time.Duration(r.ttl) * time.Second
	every, retry := ttl/3, min(500*time.Millisecond, ttl/6)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		ctx, cancel := context.WithTimeout(r.ctx, every)
		resp, err := r.cli.KeepAliveOnce(ctx, id)
		cancel()
		switch {
		case err == nil && resp.TTL > 0:
			r.renewedAt.Store(sent.UnixNano())
			t.Reset(every)
		case err == nil, errors.Is(err, rpctypes.ErrLeaseNotFound):
			return // etcd expired it
		case r.ctx.Err() != nil:
			return
		case time.Now().After(r.leaseExpiry()):
			return // no renewal for a TTL: etcd has expired it by now
		default:
			t.Reset(retry)
		}
	}
}

// validUntil is the time until which the registration is certainly still in
// etcd: the last renewal's send time plus the TTL, minus a margin (a
// quarter of the TTL, at most 1 s) for etcd's timer and the time the
// follower needs to stop writes. Past it, a migrator may see this proxy as
// gone and switch a shard without its acknowledgement, so the lock
// follower fences every sharded write (see doc.go, "Migration lock"). It
// is the zero time once Close has begun.
func (r *Registration) validUntil() time.Time {
	if r.ctx.Err() != nil {
		return time.Time{}
	}
	ttl := time.Duration(r.ttl) * time.Second
	return r.leaseExpiry().Add(-min(time.Second, ttl/4))
}

// leaseExpiry is when etcd expires the registration if it hears nothing
// more, by our clock: the last renewal plus the TTL.
func (r *Registration) leaseExpiry() time.Time {
	return time.Unix(0, r.renewedAt.Load()).Add(time.Duration(r.ttl) * time.Second)
}

// proxyID is the id the proxy registered under.
func (r *Registration) proxyID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.info.ID
}

// revoke drops a lease, best effort, briefly bounded.
func (r *Registration) revoke(id clientv3.LeaseID) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := r.cli.Revoke(ctx, id)
	return err
}

// SetRouteVersion records the route version the proxy serves. It never
// blocks: the key is rewritten in the background, at most once per second
// however often the version changes.
func (r *Registration) SetRouteVersion(v int64) {
	if r.routeVersion.Swap(v) == v {
		return
	}
	select {
	case r.changed <- struct{}{}:
	default: // a write is already pending; it will read the latest value
	}
}

// run writes route version changes and re-registers when the lease is
// lost, until Close.
func (r *Registration) run(lost <-chan struct{}, written int64) {
	defer close(r.done)
	var (
		lastWrite time.Time
		flush     <-chan time.Time // pending route version write
	)
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-lost:
			// etcd reported the lease expired, or no renewal succeeded
			// for a TTL.
			if r.ctx.Err() != nil {
				return
			}
			gone := r.leaseID()
			r.losses.Add(1)
			r.log.Warn("proxy registration lost (etcd unreachable for longer than the lease TTL, or the lease expired); re-registering in the background",
				zap.String("lease", leaseHex(gone)))
			if lost, written = r.reregister(); lost == nil {
				return // closed
			}
			lastWrite = time.Now()
			// The old lease may still be alive in etcd (a restarted etcd
			// extends leases); the key now belongs to the new one.
			_ = r.revoke(gone)
		case <-r.changed:
			if flush == nil {
				flush = time.After(max(0, routeVersionMinInterval-time.Since(lastWrite)))
			}
		case <-flush:
			flush = nil
			if r.routeVersion.Load() == written {
				continue
			}
			v, err := r.writeValue()
			if err != nil {
				// Retry later; if the lease is gone, re-registering writes
				// the latest version anyway.
				r.log.Warn("cannot update the route version of the proxy registration; retrying", zap.Int64("route_version", v), zap.Error(err))
				flush = time.After(routeVersionMinInterval)
				continue
			}
			written, lastWrite = v, time.Now()
		}
	}
}

// writeValue rewrites the key with the current lease and value.
func (r *Registration) writeValue() (int64, error) {
	ctx, cancel := context.WithTimeout(r.ctx, registerTimeout)
	defer cancel()
	val, v := r.value()
	_, err := r.cli.Put(ctx, r.key, val, clientv3.WithLease(r.leaseID()))
	return v, err
}

// Put writes key = value under the registration's lease, so the key goes
// with the registration (process death, Close, lease expiry). A key written
// under a lease lost since is gone with it: writers that must stay visible
// write again periodically.
func (r *Registration) Put(ctx context.Context, key, value string) error {
	_, err := r.cli.Put(ctx, key, value, clientv3.WithLease(r.leaseID()))
	return err
}

// Delete removes a key written with Put before the registration ends.
func (r *Registration) Delete(ctx context.Context, key string) error {
	_, err := r.cli.Delete(ctx, key)
	return err
}

// reregister retries establish with backoff until it succeeds (the new
// lease's loss channel and the route version written) or Close is called
// (nil).
func (r *Registration) reregister() (<-chan struct{}, int64) {
	backoff := minReregisterBackoff
	for attempt := 1; ; attempt++ {
		// gRPC backs reconnects off for up to minutes while etcd is down;
		// this is the moment we want to know it is back.
		if conn := r.cli.ActiveConnection(); conn != nil {
			conn.ResetConnectBackoff()
		}
		ctx, cancel := context.WithTimeout(r.ctx, registerTimeout)
		lost, written, err := r.establish(ctx)
		cancel()
		if err == nil {
			r.log.Info("proxy re-registered with a new lease", zap.Int("attempts", attempt), zap.String("lease", leaseHex(r.leaseID())))
			return lost, written
		}
		if r.ctx.Err() != nil {
			return nil, 0
		}
		if attempt == 1 || attempt%10 == 0 {
			r.log.Warn("cannot re-register the proxy yet; retrying", zap.Int("attempt", attempt), zap.Duration("backoff", backoff), zap.Error(err))
		}
		select {
		case <-r.ctx.Done():
			return nil, 0
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxReregisterBackoff)
	}
}

// Close stops the background work and revokes the lease, which removes the
// key at once. It returns the revoke error (etcd unreachable: the key then
// expires after the TTL). Close is idempotent; later calls return the first
// call's result.
func (r *Registration) Close() error {
	r.closeOnce.Do(func() {
		r.cancel()
		<-r.done
		if err := r.revoke(r.leaseID()); err != nil {
			r.closeErr = fmt.Errorf("coord: revoke the registration lease of %s (it expires within %ds): %w", r.key, r.ttl, err)
			r.log.Warn("cannot revoke the registration lease; the key expires with it", zap.Error(err))
			return
		}
		r.log.Info("proxy unregistered")
	})
	return r.closeErr
}

// ListProxies returns the proxies registered in the cluster, sorted by ID.
// Values that do not decode are skipped: one broken entry written by hand
// must not hide the others. Without a deadline on ctx, the read is bounded
// by routecfg.DefaultReadTimeout.
func ListProxies(ctx context.Context, cli *clientv3.Client, cluster string) ([]ProxyInfo, error) {
	regs, err := registrations(ctx, cli, cluster)
	if err != nil {
		return nil, err
	}
	out := make([]ProxyInfo, len(regs))
	for i, r := range regs {
		out[i] = r.info
	}
	slices.SortFunc(out, func(a, b ProxyInfo) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// registration is one proxy's key as read, with its revision.
type registration struct {
	info   ProxyInfo
	key    string
	modRev int64
}

// registrations reads the cluster's proxy keys (ListProxies' rules: values
// that do not decode are skipped; routecfg.DefaultReadTimeout without a
// deadline).
func registrations(ctx context.Context, cli *clientv3.Client, cluster string) ([]registration, error) {
	if err := validKeyPart("cluster name", cluster); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, routecfg.DefaultReadTimeout)
		defer cancel()
	}
	prefix := ProxiesPrefix(cluster)
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("coord: list proxies under %s: %w", prefix, err)
	}
	out := make([]registration, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		p, err := decodeProxy(kv.Value)
		if err != nil {
			continue
		}
		if id := strings.TrimPrefix(string(kv.Key), prefix); p.ID == "" {
			p.ID = id
		}
		out = append(out, registration{info: p, key: string(kv.Key), modRev: kv.ModRevision})
	}
	return out, nil
}

// RemovePredecessors deletes the registrations that dead predecessors of
// self left on this host: the same listen address (which self has just
// bound, so no live process of this host listens there) and an ID of the
// form "<hostname>-<pid>" with this host's name and a pid that running
// says is gone. A proxy restarted at its address would otherwise stay
// listed twice until the dead one's lease expired (the registry TTL), and
// a migration switch meanwhile waits for an acknowledgement the dead one
// never sends (the dead-proxy probe finds the address answering: the new
// process) and aborts once after holding the shard's writes. Each key is
// deleted only if it still holds what was read. It returns the IDs
// removed.
func RemovePredecessors(ctx context.Context, cli *clientv3.Client, cluster string, self ProxyInfo, hostname string, running func(pid int) bool) ([]string, error) {
	if self.Listen == "" || hostname == "" {
		return nil, nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, routecfg.DefaultReadTimeout)
		defer cancel()
	}
	regs, err := registrations(ctx, cli, cluster)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, r := range regs {
		p := r.info
		if p.ID == self.ID || p.Listen != self.Listen {
			continue
		}
		pidText, ok := strings.CutPrefix(p.ID, hostname+"-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || running(pid) {
			continue
		}
		tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(r.key), "=", r.modRev)).
			Then(clientv3.OpDelete(r.key)).Commit()
		if err != nil {
			return removed, fmt.Errorf("coord: remove the registration of %s: %w", p.ID, err)
		}
		if tr.Succeeded {
			removed = append(removed, p.ID)
		}
	}
	return removed, nil
}
