// Command convoy is the Convoy proxy. This file only wires packages together:
// flags, config, signals.
//
//	convoy serve [--config FILE] [--listen ADDR] [--etcd HOSTS] [--cluster NAME]
//	convoy routes init|show|apply FILE [--etcd HOSTS] [--cluster NAME]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zapgrpc"

	"github.com/convoy-im/convoy/histcache"
	"github.com/convoy-im/convoy/internal/slogzap"
	"github.com/convoy-im/convoy/proxy"
	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/proxy/engine"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage:
  convoy serve  [--config FILE] [--listen ADDR] [--etcd HOST:PORT,...] [--cluster NAME]
  convoy routes [--config FILE] [--etcd HOST:PORT,...] [--cluster NAME] init|show|apply FILE ...
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

func etcdClient(c Config, log *zap.Logger) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   c.Etcd.Endpoints,
		DialTimeout: c.Etcd.DialTimeout,
		Logger:      log.Named("etcd"),
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
	clientv3.SetLogger(zapgrpc.NewLogger(log.Named("grpc").WithOptions(zap.IncreaseLevel(zapcore.ErrorLevel))))
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

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	users := make([]proxy.User, 0, len(c.Users))
	for _, u := range c.Users {
		pw, err := u.password()
		if err != nil {
			return err
		}
		users = append(users, proxy.User{Name: u.Name, Password: pw, Admin: u.Admin})
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
		MaxInList: c.Engine.MaxInList, DDLParallelism: c.Engine.DDLParallelism, MaxPacket: int64(c.MaxPacket),
		ScatterParallelism: c.Engine.ScatterParallelism, MaxScatterRows: c.Engine.MaxScatterRows,
		StatsWindow: c.Health.StatsWindow, HealthQPS: c.Health.ShardQPS, HealthWriteP99: c.Health.WriteP99,
		HealthDiskPct: c.Health.DiskPercent, DiskCapacity: c.Health.DiskCapacity,
		HoldMaxWait: c.Migration.HoldMaxWait, HoldMaxQueue: c.Migration.HoldMaxQueue,
	})
	if c.HotTier.Enabled {
		// go-redis logs through a package-level logger: plain text on
		// stderr unless routed into ours.
		redis.SetLogger(histcache.RedisLogger(log.Named("redis")))
		pw := c.HotTier.Password
		if c.HotTier.PasswordEnv != "" {
			pw = os.Getenv(c.HotTier.PasswordEnv)
		}
		rdb := redis.NewUniversalClient(&redis.UniversalOptions{
			Addrs: c.HotTier.Addrs, Password: pw,
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
	eng.SetAdmin(engine.AdminHooks{
		Reload: watcher.Reload,
		Pools: func() []engine.PoolStat {
			var out []engine.PoolStat
			for _, p := range pools.Stats() {
				out = append(out, engine.PoolStat{Datasource: p.Datasource, InUse: p.InUse, Idle: p.Idle,
					State: p.Health.State.String(), Since: p.Health.Since, LastError: p.Health.LastError})
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
		Proxies: func(ctx context.Context) ([]engine.ProxyInfo, error) {
			ps, err := routecfg.ListProxies(ctx, cli, c.Etcd.Cluster)
			out := make([]engine.ProxyInfo, len(ps))
			for i, p := range ps {
				out[i] = engine.ProxyInfo(p)
			}
			return out, err
		},
	})
	srv, err := proxy.New(proxy.Config{
		Users: users, ServerVersion: c.ServerVersion, AuthMethod: c.AuthMethod,
		TLSCert: c.TLSCert, TLSKey: c.TLSKey, MaxConnections: c.MaxConns,
		MaxUserConnections: c.MaxUserConns, MaxPacket: c.MaxPacket, MaxPreparedPerSession: c.MaxPreparedPerSession,
		AuthFailures: c.AuthFailures, AuthWindow: c.AuthWindow, RequireSecureTransport: c.RequireSecureTransport,
		StatementLogRate: c.StatementLogRate,
	}, eng, log.Named("proxy"), reg)
	if err != nil {
		return err
	}

	if c.MetricsListen != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		hs := &http.Server{Addr: c.MetricsListen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := hs.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics listener", zap.Error(err))
			}
		}()
		defer hs.Close()
	}

	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return err
	}
	// Register this instance (SHOW PROXIES, and the proxies a migration
	// switch waits for) and follow the migration locks before accepting
	// clients; see migrationLock for what happens when etcd does not answer.
	hostname, _ := os.Hostname()
	lockMetrics, err := routecfg.NewLockMetrics(reg, c.Etcd.Cluster)
	if err != nil {
		return err
	}
	ml := &migrationLock{
		cli: cli, cluster: c.Etcd.Cluster, ttl: c.Etcd.RegistrationTTL, routes: watcher,
		info: routecfg.ProxyInfo{
			ID: fmt.Sprintf("%s-%d", hostname, os.Getpid()), Listen: ln.Addr().String(), Metrics: c.MetricsListen,
			Version: version, StartedAt: time.Now(),
		},
		holder: &shardHolder{e: eng}, metrics: lockMetrics, log: log,
		registered: func(r *routecfg.Registration) {
			f := func(s *router.Snapshot) { r.SetRouteVersion(s.Version()) }
			onRoutes.Store(&f)
		},
	}
	if err := ml.start(ctx); err != nil {
		return err
	}
	defer ml.Close()
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
