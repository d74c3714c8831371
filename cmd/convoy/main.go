// Command convoy is the Convoy proxy. This file only wires packages together:
// flags, config, signals.
//
//	convoy serve [--config FILE] [--listen ADDR] [--etcd HOSTS] [--cluster NAME]
//	convoy routes init|show|apply FILE [--etcd HOSTS] [--cluster NAME]
//	convoy migrate start|plan|apply|status|watch|next|pause|resume|rollback|cancel|rate|worker ...
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zapgrpc"

	"github.com/convoy-im/convoy/archive"
	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/histcache"
	"github.com/convoy-im/convoy/internal/slogzap"
	"github.com/convoy-im/convoy/migrate"
	"github.com/convoy-im/convoy/migrate/inproxy"
	"github.com/convoy-im/convoy/planner"
	"github.com/convoy-im/convoy/proxy"
	"github.com/convoy-im/convoy/proxy/admin"
	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/proxy/engine"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
	"github.com/convoy-im/convoy/shardmap"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage:
  convoy serve  [--config FILE] [--listen ADDR] [--etcd HOST:PORT,...] [--cluster NAME]
  convoy routes [--config FILE] [--etcd HOST:PORT,...] [--cluster NAME] init|show|apply FILE ...
  convoy migrate [--config FILE] [--etcd HOST:PORT,...] [--cluster NAME] start|plan|apply|status|watch|next|pause|resume|rollback|cancel|rate|purge|worker ...
  convoy plan   [--simulate] [--rate N] [--parallel N] [--out FILE] ...   (convoy plan -h)
  convoy archive [--config FILE] [--etcd HOST:PORT,...] [--cluster NAME] rebuild [SHARD|FROM-TO]
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "routes":
		err = routes(os.Args[2:])
	case "migrate":
		err = migrateCmd(os.Args[2:])
	case "plan":
		err = plan(os.Args[2:])
	case "archive":
		err = archiveCmd(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		err = fmt.Errorf("unknown command %q\n%s", os.Args[1], usage)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "convoy:", err)
		os.Exit(1)
	}
}

// commonFlags are shared by every subcommand; they override the config file.
type commonFlags struct {
	fs                            *flag.FlagSet
	config, listen, etcd, cluster *string
}

func newFlags(name string) commonFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	return commonFlags{
		fs:      fs,
		config:  fs.String("config", os.Getenv("CONVOY_CONFIG"), "YAML config file"),
		listen:  fs.String("listen", "", "client listen address (overrides config)"),
		etcd:    fs.String("etcd", "", "comma-separated etcd endpoints (overrides config)"),
		cluster: fs.String("cluster", "", "cluster name: routes live at /convoy/<cluster>/routes (overrides config)"),
	}
}

// subcommand parses a maintenance command's flags (usage on -h) and loads
// the config; rest are its words after the flags.
func subcommand(name, usage string, args []string) (c Config, rest []string, err error) {
	f := newFlags(name)
	f.fs.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	if err := f.fs.Parse(args); err != nil {
		return c, nil, err
	}
	c, err = f.load()
	return c, f.fs.Args(), err
}

func (f commonFlags) load() (Config, error) {
	c, err := loadConfig(*f.config)
	if err != nil {
		return c, err
	}
	if *f.listen != "" {
		c.Listen = *f.listen
	}
	if *f.etcd != "" {
		c.Etcd.Endpoints = strings.Split(*f.etcd, ",")
	}
	if *f.cluster != "" {
		c.Etcd.Cluster = *f.cluster
	}
	return c, nil
}

// etcdClient connects to etcd as the config says: TLS (server verified,
// optionally a client certificate) and a user with its password when set.
func etcdClient(c Config, log *zap.Logger) (*clientv3.Client, error) {
	tlsCfg, err := c.Etcd.TLS.config("etcd")
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		for _, ep := range c.Etcd.Endpoints {
			// The client drops TLS for an http:// endpoint without a word.
			if strings.HasPrefix(ep, "http://") {
				return nil, fmt.Errorf("etcd endpoint %s is http:// but etcd.tls is set: use https:// (or host:port)", ep)
			}
		}
	}
	pw, err := secret("etcd", "", c.Etcd.PasswordEnv, c.Etcd.PasswordFile)
	if err != nil {
		return nil, err
	}
	if (c.Etcd.Username == "") != (pw == "") {
		return nil, errors.New("etcd: set both username and password_env / password_file, or neither")
	}
	ctx := context.Background()
	if cn := c.Etcd.TLS.commonName(); cn != "" && c.Etcd.Username == "" {
		ctx = routecfg.WithCertIdentity(ctx, cn) // who stamps route changes
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   c.Etcd.Endpoints,
		DialTimeout: c.Etcd.DialTimeout,
		Logger:      log.Named("etcd"),
		TLS:         tlsCfg,
		Username:    c.Etcd.Username,
		Password:    pw,
		Context:     ctx,
	})
}

func routes(args []string) error {
	f := newFlags("routes")
	// Flags come first; the rest (init|show|apply ...) goes to routecfg.
	if err := f.fs.Parse(args); err != nil {
		return err
	}
	c, err := f.load()
	if err != nil {
		return err
	}
	cli, err := etcdClient(c, zap.NewNop())
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return routecfg.RunCLI(ctx, f.fs.Args(), cli, c.Etcd.Cluster, os.Stdout)
}

// redisClient is the hot tier's Redis client (a single node, or Redis
// Cluster for several addresses) with the config's ACL user, password and
// TLS.
func redisClient(c Config) (redis.UniversalClient, error) {
	pw, err := secret("hot_tier", c.HotTier.Password, c.HotTier.PasswordEnv, c.HotTier.PasswordFile)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := c.HotTier.TLS.config("hot_tier")
	if err != nil {
		return nil, err
	}
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: c.HotTier.Addrs, Username: c.HotTier.Username, Password: pw, TLSConfig: tlsCfg,
		// Without this a hung (not dead) Redis would hold a read until the
		// socket timeout instead of the tier's per-call budget.
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		// One retry (a pooled connection Redis closed) and one dial
		// attempt: a refused connection then fails the call at once,
		// as a refusal the circuit breaker can tell from a timeout,
		// instead of retrying until the per-call timeout.
		MaxRetries: 1, DialerRetries: 1,
	})
	return rdb, nil
}

// newLogger builds the process logger on w (stderr). Both formats carry
// ISO-8601 times (a person and a log shipper read them alike); console is
// zap's tab-separated line with the fields as JSON at the end.
func newLogger(level, format string, w zapcore.WriteSyncer) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.Set(level); err != nil {
		return nil, fmt.Errorf("log_level: %w", err)
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch format {
	case "json":
		enc = zapcore.NewJSONEncoder(ec)
	case "console":
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, fmt.Errorf("log_format %q: want json or console", format)
	}
	// No sampling: the few lines that repeat are rate-limited where they
	// are written (failed statements, go-redis), with a count of the rest.
	return zap.New(zapcore.NewCore(enc, w, lvl), zap.AddCaller(), zap.AddStacktrace(zapcore.ErrorLevel), zap.ErrorOutput(w)), nil
}

// routeLibraryLogs makes the libraries that log on their own write into log,
// in its format: go-mysql through log/slog and the standard log package,
// grpc (the etcd client's transport) through grpclog, whose own default
// writes only errors, as here. The etcd client takes log in its Config and
// go-redis is routed where the hot tier is set up.
func routeLibraryLogs(log *zap.Logger) {
	slog.SetDefault(slog.New(slogzap.Handler(log.Named("lib"))))
	//lint:ignore SA1019 the client's own hook for gRPC's logger; grpclog.SetLoggerV2 would need gRPC's logger type for the same effect
	clientv3.SetLogger(zapgrpc.NewLogger(log.Named("grpc").WithOptions(zap.IncreaseLevel(zapcore.ErrorLevel))))
}

// configUsers are the accounts of the config, passwords resolved.
func configUsers(c Config) ([]proxy.User, error) {
	users := make([]proxy.User, 0, len(c.Users))
	for _, u := range c.Users {
		pw, err := u.password()
		if err != nil {
			return nil, err
		}
		user := proxy.User{Name: u.Name, Password: pw, Admin: u.Admin}
		switch strings.ToLower(u.Txn) {
		case "", "single":
		case "outbox":
			user.Outbox = true
		default:
			return nil, fmt.Errorf("user %s: txn %q: want single or outbox", u.Name, u.Txn)
		}
		if len(u.Privileges) > 0 || len(u.Databases) > 0 {
			p, err := engine.ParsePrivileges(u.Privileges, u.Admin, u.Databases)
			if err != nil {
				return nil, fmt.Errorf("user %s: %w", u.Name, err)
			}
			user.Privileges = &p
		}
		users = append(users, user)
	}
	return users, nil
}

// newRegistry is a process's metrics registry with the Go runtime's and
// the process's own collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

func serve(args []string) error {
	f := newFlags("serve")
	if err := f.fs.Parse(args); err != nil {
		return err
	}
	c, err := f.load()
	if err != nil {
		return err
	}
	log, err := newLogger(c.LogLevel, c.LogFormat, zapcore.Lock(os.Stderr))
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	routeLibraryLogs(log)

	reg := newRegistry()

	users, err := configUsers(c)
	if err != nil {
		return err
	}

	cli, err := etcdClient(c, log)
	if err != nil {
		return err
	}
	defer cli.Close()

	pools := backend.NewManager(backend.Options{
		ConnectTimeout: c.Backend.ConnectTimeout, ReadTimeout: c.Backend.ReadTimeout, WriteTimeout: c.Backend.WriteTimeout,
		WaitTimeout: c.Backend.WaitTimeout, MaxOpen: c.Backend.MaxOpen, MaxIdle: c.Backend.MaxIdle,
		StatementTimeout: c.Backend.StatementTimeout, HealthInterval: c.Backend.HealthInterval, HealthTimeout: c.Backend.HealthTimeout,
		Log: log.Named("backend"),
	})
	defer pools.Close()
	reg.MustRegister(pools.Collector())

	var onRoutes atomic.Pointer[func(*router.Snapshot)] // set once the proxy is registered
	watcher := routecfg.NewWatcher(routecfg.NewStore(cli, c.Etcd.Cluster),
		routecfg.WithResync(c.Routes.Resync),
		routecfg.WithCacheFile(c.Routes.CacheFile),
		routecfg.WithLogger(log.Named("routes")),
		routecfg.WithRegisterer(reg),
		routecfg.WithOnChange(func(s *router.Snapshot) {
			if err := pools.Update(s); err != nil {
				log.Error("applying datasources of new route table", zap.Int64("version", s.Version()), zap.Error(err))
			}
			if f := onRoutes.Load(); f != nil {
				(*f)(s)
			}
		}),
	)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := watcher.Start(ctx); err != nil {
		return fmt.Errorf("loading the route table: %w", err)
	}
	defer watcher.Close()
	if err := pools.Update(watcher.Current()); err != nil {
		return err
	}

	eng := engine.New(engine.FromManager(pools), watcher, engine.NewMetrics(reg), log.Named("engine"), engine.Options{
		MaxInList: c.Engine.MaxInList, DDLParallelism: c.Engine.DDLParallelism, MaxPacket: int64(c.MaxPacket), LocalInfile: c.Engine.LocalInfile,
		ScatterParallelism: c.Engine.ScatterParallelism, MaxScatterRows: c.Engine.MaxScatterRows,
		StatsWindow: c.Health.StatsWindow, HealthQPS: c.Health.ShardQPS, HealthWriteP99: c.Health.WriteP99,
		HoldMaxWait: c.Migration.HoldMaxWait, HoldMaxQueue: c.Migration.HoldMaxQueue,
	})
	if c.HotTier.Enabled {
		// go-redis logs through a package-level logger: plain text on
		// stderr unless routed into ours.
		redis.SetLogger(histcache.RedisLogger(log.Named("redis")))
		rdb, err := redisClient(c)
		if err != nil {
			return err
		}
		defer rdb.Close()
		tier := histcache.New(rdb, histcache.Options{
			MaxEntries: c.HotTier.MaxEntries, TTL: c.HotTier.TTL, MarkerTTL: c.HotTier.MarkerTTL, Timeout: c.HotTier.Timeout,
			BreakerFailures: c.HotTier.BreakerFailures, BreakerMinOutage: c.HotTier.BreakerMinOutage,
			BreakerBackoff: c.HotTier.BreakerBackoff, BreakerBackoffMax: c.HotTier.BreakerBackoffMax,
			MaxUnrepaired: c.HotTier.MaxUnrepaired, Log: log.Named("histcache"),
		}, reg)
		eng.SetHotTier(tier, c.HotTier.MaxEntries)
		log.Info("history hot tier enabled", zap.Strings("redis", c.HotTier.Addrs))
	}
	// The capacity directives read the shard map's size readings (set
	// below once the page exists; without a metrics listener they report
	// that no reading was made).
	capacity := &capacityAdmin{cli: cli, c: c, routes: watcher.Current,
		sizes: func() (map[router.Shard]planner.ShardSize, time.Time, string) {
			return nil, time.Time{}, "metrics_listen is off"
		}}
	directives := admin.New(eng, admin.Config{
		Capacity: capacity,
		Reload:   watcher.Reload,
		Pools: func() []admin.PoolStat {
			var out []admin.PoolStat
			for _, p := range pools.Stats() {
				out = append(out, admin.PoolStat{Datasource: p.Datasource, InUse: p.InUse, Idle: p.Idle,
					State: p.Health.State.String(), Since: p.Health.Since, LastError: p.Health.LastError, TLS: p.TLS})
			}
			return out
		},
		Probe: func(ctx context.Context, ds string) (time.Duration, error) {
			timeout := time.Second
			if d, ok := ctx.Deadline(); ok {
				timeout = time.Until(d)
			}
			return pools.Probe(ctx, ds, timeout)
		},
		Migrations: migrate.NewAdmin(cli, c.Etcd.Cluster),
		Archive:    archiveAdmin(cli, c),
		Outbox:     outboxAdmin{eng: eng, cli: cli, cluster: c.Etcd.Cluster},
		Proxies: func(ctx context.Context) ([]admin.ProxyInfo, error) {
			ps, err := coord.ListProxies(ctx, cli, c.Etcd.Cluster)
			out := make([]admin.ProxyInfo, len(ps))
			for i, p := range ps {
				out[i] = admin.ProxyInfo(p)
			}
			return out, err
		},
		DiskPercent: c.Health.DiskPercent, DiskCapacity: c.Health.DiskCapacity,
	})
	srv, err := proxy.New(proxy.Config{
		Users: users, ServerVersion: c.ServerVersion, AuthMethod: c.AuthMethod,
		TLSCert: c.TLSCert, TLSKey: c.TLSKey, MaxConnections: c.MaxConns,
		MaxUserConnections: c.MaxUserConns, MaxPacket: c.MaxPacket, MaxPreparedPerSession: c.MaxPreparedPerSession,
		AuthFailures: c.AuthFailures, AuthWindow: c.AuthWindow, RequireSecureTransport: c.RequireSecureTransport,
		StatementLogRate: c.StatementLogRate, Admin: directives,
	}, eng, log.Named("proxy"), reg)
	if err != nil {
		return err
	}

	if c.MetricsListen != "" {
		qps, wp99 := eng.HealthThresholds()
		jobs := coord.NewJobStore(cli, c.Etcd.Cluster)
		sm := shardmap.New(shardmap.Source{
			Routes: watcher.Current, RouteStale: watcher.Stale, Stats: eng.ShardStats,
			Proxies: func(ctx context.Context) ([]coord.ProxyInfo, error) {
				return coord.ListProxies(ctx, cli, c.Etcd.Cluster)
			},
			Migrations: func(ctx context.Context) ([]coord.Job, error) {
				js, _, err := jobs.List(ctx)
				return js, err
			},
			Sizes: planner.InformationSchemaStats,
			Sample: func(ctx context.Context, s coord.SizeSample) {
				if _, err := coord.PutDailySample(ctx, cli, c.Etcd.Cluster, s); err != nil {
					log.Debug("storing the daily size sample", zap.Error(err))
				}
			},
			QPSThreshold: qps, WriteP99Threshold: wp99, Log: log.Named("shardmap"),
		})
		defer sm.Close()
		capacity.sizes = sm.Sizes
		hl, err := newHTTPListener(c, reg, users, log, sm.Register)
		if err != nil {
			return err
		}
		defer hl.Close()
	}

	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return err
	}
	// Register this instance (SHOW PROXIES, and the proxies a migration
	// switch waits for) and follow the migration locks before accepting
	// clients; see migrationLock for what happens when etcd does not answer.
	hostname, _ := os.Hostname()
	proxyID := fmt.Sprintf("%s-%d", hostname, os.Getpid())
	lockMetrics, err := coord.NewLockMetrics(reg, c.Etcd.Cluster)
	if err != nil {
		return err
	}
	// Every proxy follows the read ramps of the jobs (step 5), and counts
	// their reads per side.
	ramps, err := inproxy.NewRamps(reg)
	if err != nil {
		return err
	}
	eng.SetReadRamps(ramps)
	ml := &migrationLock{
		cli: cli, cluster: c.Etcd.Cluster, ttl: c.Etcd.RegistrationTTL, routes: watcher,
		info: coord.ProxyInfo{
			ID: proxyID, Listen: ln.Addr().String(), Metrics: c.MetricsListen,
			Version: version, StartedAt: time.Now(),
		},
		holder: &shardHolder{e: eng}, metrics: lockMetrics, log: log,
		registered: func(r *coord.Registration) {
			f := func(s *router.Snapshot) { r.SetRouteVersion(s.Version()) }
			onRoutes.Store(&f)
			// SHOW MIGRATIONS sums every live proxy's per-side reads.
			go ramps.PublishStats(ctx, r, coord.RampStatsKey(c.Etcd.Cluster, proxyID), inproxy.RampPublishEvery, log.Named("ramp"))
			// No read goes to a migration target before this proxy says
			// it may send some (a rollback waits for that to end).
			go ramps.Announce(ctx, r, func(sh int) string { return coord.RampingKey(c.Etcd.Cluster, sh, proxyID) }, log.Named("ramp"))
			// A restart at the same address: the dead predecessor's
			// registration would make a switch wait for it until its
			// lease expired.
			go func() {
				self := coord.ProxyInfo{ID: proxyID, Listen: ln.Addr().String()}
				removed, err := coord.RemovePredecessors(ctx, cli, c.Etcd.Cluster, self, hostname, pidRunning)
				if err != nil {
					log.Warn("could not remove a dead predecessor's registration", zap.Error(err))
				}
				if len(removed) > 0 {
					log.Info("removed the registrations of dead predecessors at this address", zap.Strings("proxies", removed))
				}
			}()
		},
	}
	if err := ml.start(ctx); err != nil {
		return err
	}
	defer ml.Close()
	// Every proxy mirrors the writes of migrating shards to their targets
	// (step 2); one watch of the job records feeds it and the read ramps.
	dualMetrics, err := inproxy.NewDualWriteMetrics(reg)
	if err != nil {
		return err
	}
	dual := inproxy.NewDualWrites(inproxy.DualWriteConfig{Connect: migrationConnector, Routes: watcher.Current,
		Timeout: c.Migration.DualWriteTimeout, Metrics: dualMetrics, Log: log.Named("dualwrite")})
	defer dual.Close()
	listed := make(chan struct{})
	go inproxy.WatchJobs(ctx, coord.NewJobStore(cli, c.Etcd.Cluster), log.Named("migrate"), listed, dual, ramps)
	eng.SetDualWrites(dualWrites{dual})
	// Migration jobs run in every proxy (whichever wins a job's runner
	// election), so a job survives the death of the one running it.
	if c.Migration.RunJobs == nil || *c.Migration.RunJobs {
		migrations, err := migrationManager(cli, c, proxyID, log.Named("migrate"), reg, lockMetrics)
		if err != nil {
			return err
		}
		defer migrations.Close()
	}
	// Outbox delivery runs in every proxy (whichever wins a datasource's
	// election), like the migration jobs.
	stopOutbox := startOutbox(c, cli, watcher.Current, eng, proxyID, log.Named("outbox"))
	defer stopOutbox()
	// The cold tier: every proxy with cold.enabled reads it, and runs the
	// archiver (whichever wins a shard's election), like the migration
	// jobs. It starts before search: a search backfill reads the archive.
	var catalog *archive.Catalog
	if c.Cold.Enabled {
		ct, err := startColdTier(ctx, cli, c, proxyID, log.Named("archive"), reg, eng)
		if err != nil {
			return err
		}
		defer ct.Close()
		catalog = ct.catalog
	}
	if c.Search.Enabled {
		stopSearch, err := startSearch(c, cli, watcher.Current, eng, directives, proxyID, catalog, reg, log.Named("search"))
		if err != nil {
			return fmt.Errorf("search: %w", err)
		}
		defer stopSearch()
	}
	// Writes are served once the jobs are known: a read ramp's mirror must
	// see every write of its share (inproxy.WatchJobs). Without etcd the
	// start-up fence refuses writes anyway.
	select {
	case <-listed:
	case <-time.After(5 * time.Second):
		log.Warn("the migration jobs are not listed yet (etcd slow?); serving anyway")
	}
	log.Info("convoy serving", zap.String("listen", ln.Addr().String()), zap.String("metrics", c.MetricsListen),
		zap.String("cluster", c.Etcd.Cluster), zap.Int64("route_version", watcher.Current().Version()))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err = <-errc:
	}
	_ = srv.Close()
	return err
}

// pidRunning reports whether a process with this pid exists on this host
// (EPERM: it exists, owned by another user).
func pidRunning(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
