package coord

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The proxies a switch waits for, as the migrator sees them: how messages
// name them, and when one that does not acknowledge is taken for gone
// before its registration expires.
//
// A proxy killed just after a switch began keeps its registration for its
// lease TTL (10 s by default), longer than the acknowledgement timeout
// (2 s): every switch until then would hold the shard's writes and abort.
// Two signals say sooner that it is gone, and both are only ever read as
// "gone", never as "alive":
//
//   - Its registered listen address refuses a TCP connection. The kernel
//     answers a connection to a port nobody listens on with a reset at
//     once, so this is the SIGKILLed process's listener gone (or a proxy
//     shutting down, which has closed its client connections first). Only
//     an IP literal that is not a wildcard is dialled: convoy serve
//     registers what its listener reports, a name could resolve elsewhere
//     and a wildcard is every host. Registered addresses must be the ones
//     the migrators reach the proxies at, as SHOW PROXIES promises; a proxy
//     registering a loopback address must run on the migrators' host.
//     Accepted, timed out, unreachable, no address: no evidence.
//   - After an abort, its lease (LeaseTimeToLive) runs down without being
//     renewed until it expires: the registration is then gone, and the
//     switch is tried again at once instead of at the next NEXT. A renewal
//     seen meanwhile (the remaining TTL goes up, or a new lease) means a
//     live proxy that is merely silent: the abort stands.
//
// Skipping a proxy that is in fact alive but unreachable from the migrator
// would let its writes of the shard reach the old side after the flip; the
// old side's storage fence refuses them (writes fail, none is lost), which
// is the price only a proxy whose listener is really gone pays.

const (
	// probeAfter is when the wait first dials the proxies that have not
	// acknowledged (at most a quarter of the acknowledgement timeout): a
	// live proxy acknowledges within milliseconds, so live ones are seldom
	// dialled. probeEvery paces the next rounds.
	probeAfter = 100 * time.Millisecond
	probeEvery = 250 * time.Millisecond
	// probeTimeout bounds one dial: a refusal comes back within a round
	// trip, and a timeout is no evidence anyway.
	probeTimeout = 500 * time.Millisecond
	// vanishPoll paces missingGone's reads of the registrations.
	vanishPoll = 250 * time.Millisecond
)

// Name is how messages (a switch's errors and logs, SHOW MIGRATIONS) name
// the proxy: its registered listen address (host:port, what clients dial
// and SHOW PROXIES shows); with the id only when there is no address, or
// when the address is a wildcard, the same on every host.
func (p ProxyInfo) Name() string {
	if p.Listen == "" {
		return p.ID
	}
	host, _, err := net.SplitHostPort(p.Listen)
	if err == nil && (host == "" || net.ParseIP(host).IsUnspecified()) {
		return p.Listen + " (" + p.ID + ")"
	}
	return p.Listen
}

// probeable reports whether a listen address is dialled to find a dead
// proxy: an IP literal that is not a wildcard, with a port.
func probeable(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" || port == "0" {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && !ip.IsUnspecified()
}

// listenRefused reports whether a TCP connection to addr is refused (see
// above for why that, and only that, means the proxy is gone).
func listenRefused(ctx context.Context, addr string) bool {
	if !probeable(addr) {
		return false
	}
	d := net.Dialer{Timeout: probeTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		_ = c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// refusedOf dials every probeable proxy of ps at once and returns the ids
// of those whose listen address refused the connection.
func refusedOf(ctx context.Context, ps []ProxyInfo) []string {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out []string
	)
	for _, p := range ps {
		if !probeable(p.Listen) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if listenRefused(ctx, p.Listen) {
				mu.Lock()
				out = append(out, p.ID)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// decodeProxyKV is the registration of one proxies/ key (only the id, from
// the key, when the value does not decode: written by hand).
func decodeProxyKV(prefix string, key, value []byte) ProxyInfo {
	id := strings.TrimPrefix(string(key), prefix)
	p, err := decodeProxy(value)
	if err != nil {
		return ProxyInfo{ID: id}
	}
	p.ID = id // the key is what acknowledgements and the wait use
	return p
}

// missingGone waits, after a switch aborted because the proxies of missing
// did not acknowledge, until each of them is gone: its registration
// deleted, its listen address refusing connections, or its lease expired
// without a renewal. It returns false as soon as one shows that it lives
// (its lease renewed, or a new lease: it registered again), when etcd does
// not answer, when ctx ends or the runner loses its lease, and when a
// registration outlives the lease time it had left (a renewal the TTL's
// whole seconds hid). Nothing is held meanwhile.
func (r *Runner) missingGone(ctx context.Context, missing map[string]ProxyInfo, log *zap.Logger) bool {
	cli, cluster := r.store.cli, r.store.cluster
	type seen struct {
		lease   clientv3.LeaseID
		ttl     int64     // remaining seconds at the last read
		expires time.Time // by when the lease ends unless renewed, from the first read
	}
	leases := map[string]*seen{}
	left := map[string]ProxyInfo{}
	for id, p := range missing {
		left[id] = p
	}
	for {
		for id, p := range left {
			resp, err := cli.Get(ctx, ProxyKey(cluster, id))
			if err != nil {
				return false
			}
			if len(resp.Kvs) == 0 {
				log.Info("the proxy that did not acknowledge is no longer registered", zap.String("proxy", p.Name()))
				delete(left, id)
				continue
			}
			lease := clientv3.LeaseID(resp.Kvs[0].Lease)
			s := leases[id]
			if s != nil && s.lease != lease {
				return false // registered again: alive
			}
			if listenRefused(ctx, p.Listen) {
				log.Info("the proxy that did not acknowledge refuses connections: its process is gone", zap.String("proxy", p.Name()))
				delete(left, id)
				continue
			}
			ttl, err := cli.TimeToLive(ctx, lease)
			if err != nil {
				return false
			}
			switch {
			case ttl.TTL < 0: // expired; the key goes with it
				delete(left, id)
				continue
			case s == nil:
				// TTL is whole seconds, rounded down.
				s = &seen{lease: lease, expires: time.Now().Add(time.Duration(ttl.TTL+1)*time.Second + vanishPoll)}
				leases[id] = s
			case ttl.TTL > s.ttl:
				log.Info("the proxy that did not acknowledge renews its registration: alive, the abort stands", zap.String("proxy", p.Name()))
				return false
			case time.Now().After(s.expires):
				return false
			}
			s.ttl = ttl.TTL
		}
		if len(left) == 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-r.Done():
			return false
		case <-time.After(vanishPoll):
		}
	}
}
