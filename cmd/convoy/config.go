package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/convoy-im/convoy/search"
)

// Config is the YAML configuration of `convoy serve`. Flags and CONVOY_*
// environment variables override the file (see applyEnv).
type Config struct {
	Listen        string `yaml:"listen"`
	MetricsListen string `yaml:"metrics_listen"`
	LogLevel      string `yaml:"log_level"`
	// LogFormat is json (default: one object a line, for log shippers) or
	// console (tab-separated, for a person reading a terminal: make run).
	LogFormat     string `yaml:"log_format"`
	ServerVersion string `yaml:"server_version"`
	AuthMethod    string `yaml:"auth_method"`
	TLSCert       string `yaml:"tls_cert"`
	TLSKey        string `yaml:"tls_key"`
	MaxConns      int    `yaml:"max_connections"`
	// Client bounds (0 = default): see proxy.Config.
	MaxUserConns           int           `yaml:"max_user_connections"`
	MaxPacket              int           `yaml:"max_packet"`
	MaxPreparedPerSession  int           `yaml:"max_prepared_per_session"`
	AuthFailures           int           `yaml:"auth_failures"`
	AuthWindow             time.Duration `yaml:"auth_window"`
	RequireSecureTransport bool          `yaml:"require_secure_transport"`
	// StatementLogRate bounds the log lines about failed client statements
	// per errno and second (0 = default 5, negative = none).
	StatementLogRate int `yaml:"statement_log_rate"`

	// HTTP secures the metrics_listen listener (metrics, pprof, the shard
	// map page). On loopback it is open; bound elsewhere it needs TLS and
	// answers only admin users (HTTP basic authentication), unless
	// insecure_non_loopback says the network is private.
	HTTP struct {
		TLSCert string `yaml:"tls_cert"`
		TLSKey  string `yaml:"tls_key"`
		// Pprof serves /debug/pprof; default on for loopback, off elsewhere.
		Pprof               *bool `yaml:"pprof"`
		InsecureNonLoopback bool  `yaml:"insecure_non_loopback"`
	} `yaml:"http"`

	Etcd struct {
		Endpoints   []string      `yaml:"endpoints"`
		Cluster     string        `yaml:"cluster"`
		DialTimeout time.Duration `yaml:"dial_timeout"`
		// RegistrationTTL is the lease of this proxy's registration: how
		// long a dead proxy is still listed, and still waited for by a
		// migration switch (default 10s).
		RegistrationTTL time.Duration `yaml:"registration_ttl"`
		// Username and its password (from password_env or password_file)
		// authenticate to etcd when auth is enabled; a client certificate
		// (tls.cert_file) may stand in for both: etcd then takes its
		// common name as the user.
		Username     string   `yaml:"username"`
		PasswordEnv  string   `yaml:"password_env"`
		PasswordFile string   `yaml:"password_file"`
		TLS          TLSFiles `yaml:"tls"`
	} `yaml:"etcd"`

	Routes struct {
		Resync    time.Duration `yaml:"resync"`
		CacheFile string        `yaml:"cache_file"`
	} `yaml:"routes"`

	Users []UserConfig `yaml:"users"`

	Backend struct {
		ConnectTimeout time.Duration `yaml:"connect_timeout"`
		ReadTimeout    time.Duration `yaml:"read_timeout"`
		WriteTimeout   time.Duration `yaml:"write_timeout"`
		WaitTimeout    time.Duration `yaml:"wait_timeout"`
		MaxOpen        int           `yaml:"max_open"`
		MaxIdle        int           `yaml:"max_idle"`
		// StatementTimeout bounds each backend statement (default 10s,
		// 0 = off); HealthInterval and HealthTimeout pace and bound the
		// health probe of each datasource (defaults 500ms, 1s).
		StatementTimeout time.Duration `yaml:"statement_timeout"`
		HealthInterval   time.Duration `yaml:"health_interval"`
		HealthTimeout    time.Duration `yaml:"health_timeout"`
	} `yaml:"backend"`

	Engine struct {
		MaxInList          int `yaml:"max_in_list"`
		ScatterParallelism int `yaml:"scatter_parallelism"`
		MaxScatterRows     int `yaml:"max_scatter_rows"`
		DDLParallelism     int `yaml:"ddl_parallelism"`
		// LocalInfile: where LOAD DATA LOCAL INFILE may write: sharded
		// (default), all (unsharded tables too) or off.
		LocalInfile string `yaml:"local_infile"`
	} `yaml:"engine"`

	// HotTier is the Redis history cache of docs/design.md §4.
	HotTier struct {
		Enabled      bool          `yaml:"enabled"`
		Addrs        []string      `yaml:"addrs"`    // one address: single node; several: Redis Cluster
		Username     string        `yaml:"username"` // Redis 6 ACL user; empty: "default"
		Password     string        `yaml:"password"` // prefer password_env / password_file
		PasswordEnv  string        `yaml:"password_env"`
		PasswordFile string        `yaml:"password_file"`
		TLS          TLSFiles      `yaml:"tls"`
		Timeout      time.Duration `yaml:"timeout"`     // per Redis call; default 50ms
		MaxEntries   int           `yaml:"max_entries"` // newest messages kept per conversation; default 500
		TTL          time.Duration `yaml:"ttl"`         // default 168h (7 days)
		MarkerTTL    time.Duration `yaml:"marker_ttl"`  // must exceed the longest commit; default 5s
		// Circuit breaker (histcache.Options): after breaker_failures
		// consecutive failed calls spanning breaker_min_outage the tier is
		// bypassed; probes every breaker_backoff .. breaker_backoff_max.
		BreakerFailures   int           `yaml:"breaker_failures"`    // default 5; -1 = never bypass
		BreakerMinOutage  time.Duration `yaml:"breaker_min_outage"`  // default 250ms
		BreakerBackoff    time.Duration `yaml:"breaker_backoff"`     // default 200ms
		BreakerBackoffMax time.Duration `yaml:"breaker_backoff_max"` // default 1s; the same on every proxy
		MaxUnrepaired     int           `yaml:"max_unrepaired"`      // default 10000
	} `yaml:"hot_tier"`

	// Migration configures online shard migration (docs/design.md §5): the runners
	// every convoy serve hosts (package migrate) and the proxy's share of
	// the switch lock.
	Migration struct {
		// RollbackWindow: how long reverse replication keeps the old side
		// current after a switch (default 168h, 7 days).
		RollbackWindow time.Duration `yaml:"rollback_window"`
		// Rate: copy rows per second of a job without its own RATE
		// (default 2000; negative = unlimited).
		Rate float64 `yaml:"rate"`
		// ThrottleWriteP99: a copy slows down while either side's write
		// probes take longer than this (default 50ms, the trigger of
		// docs/design.md §7; negative = never).
		ThrottleWriteP99 time.Duration `yaml:"throttle_write_p99"`
		// RunJobs: this process campaigns for and runs migration jobs
		// (default true). Turn it off for proxies whose etcd role may not
		// write migration state (README, "Hardening"); run `convoy migrate
		// worker` with the migration role instead.
		RunJobs *bool `yaml:"run_jobs"`
		// RunnerTTL: the lease of the process running a job (default
		// 10s): how long a job waits after its runner died before
		// another process takes it over from its last checkpoint.
		RunnerTTL time.Duration `yaml:"runner_ttl"`
		// A write of a shard held for a migration switch waits at most
		// hold_max_wait (default 3s), behind at most hold_max_queue other
		// writes of that shard (default 10000); past either it gets MySQL
		// error 1205 naming the shard.
		HoldMaxWait  time.Duration `yaml:"hold_max_wait"`
		HoldMaxQueue int           `yaml:"hold_max_queue"`
		// DualWriteTimeout bounds what mirroring a write of a migrating
		// shard to its target adds before the client's ACK (default
		// 500ms); past it the write's keys go to the compensation queue.
		DualWriteTimeout time.Duration `yaml:"dualwrite_timeout"`
	} `yaml:"migration"`

	// Outbox is the cross-shard outbox (docs/design.md §12, package
	// outbox): transactions of sessions with convoy_txn = 'outbox' record
	// their rows for other shards; the delivery workers apply them.
	Outbox struct {
		// RunWorkers: this process campaigns for and runs datasources'
		// delivery workers (default true; one per datasource in the
		// cluster is elected).
		RunWorkers *bool `yaml:"run_workers"`
		// RunnerTTL: how long a dead worker's datasource waits before
		// another process delivers its entries (default 10s).
		RunnerTTL time.Duration `yaml:"runner_ttl"`
		// Poll: a worker's wait between passes that found nothing due
		// (default 200ms; a COMMIT on this process wakes its worker at once).
		Poll time.Duration `yaml:"poll"`
		// MaxTries: failures that do not pass by themselves (a
		// constraint) before an entry becomes a dead letter (default 10).
		MaxTries int `yaml:"max_tries"`
		// Batch: entries read per pass (default 10000).
		Batch int `yaml:"batch"`
		// KeepMarkers: how long the applied markers in the shard
		// databases are kept (default 168h): an entry applied by a worker
		// that died before removing it must find its marker when tried
		// again, which is seconds later unless its home datasource stays
		// down that long.
		KeepMarkers time.Duration `yaml:"keep_markers"`
	} `yaml:"outbox"`

	// Search is message search (docs/design.md §10; seed 000: "检索"; package
	// search): the virtual table msg_search and the index feeds.
	Search struct {
		Enabled bool `yaml:"enabled"`
		// Engine is bleve (embedded, the default) or sphinx.
		Engine string `yaml:"engine"`
		// Dir is the bleve index directory.
		Dir    string `yaml:"dir"`
		Sphinx struct {
			// Partitions are the searchd SphinxQL addresses, in partition
			// order (deploy/sphinx/sphinx.conf).
			Partitions  []string `yaml:"partitions"`
			Index       string   `yaml:"index"`
			Distributed string   `yaml:"distributed"`
			Checkpoints string   `yaml:"checkpoints"`
		} `yaml:"sphinx"`
		// FreshWindow: messages this young are also read from MySQL
		// (default 5m).
		FreshWindow time.Duration     `yaml:"fresh_window"`
		Extraction  search.Extraction `yaml:"extraction"`
		// RunIndexer: this process campaigns for and runs index feeds
		// (default true).
		RunIndexer *bool `yaml:"run_indexer"`
		// RunnerTTL: how long a dead indexer's feed waits before another
		// process takes it over (default 10s).
		RunnerTTL time.Duration `yaml:"runner_ttl"`
	} `yaml:"search"`
	// Cold is the cold tier (docs/design.md §9, package archive): the archiver
	// every convoy serve hosts when enabled, and the cold read path.
	Cold struct {
		// Enabled: history reads continue into the archive, writes naming
		// archived rows are checked against it, this process runs archiver
		// jobs (unless run_jobs is false) and answers SHOW ARCHIVE
		// (default false).
		Enabled bool `yaml:"enabled"`
		// RunJobs: this process campaigns for and runs the shards'
		// archiver jobs (default true); the cold read path works either
		// way.
		RunJobs *bool `yaml:"run_jobs"`
		// Store is the object store URL: file:///dir or
		// s3://bucket?endpoint=...&use_path_style=true&... (cold.OpenStore);
		// default file://<working directory>/.state/cold.
		Store string `yaml:"store"`
		// StoreShared says a file:// store is one directory every Convoy
		// process mounts (a network file system). Without it a file://
		// store is taken as this host's alone: archiving then runs only
		// while this is the only registered Convoy process (default
		// false).
		StoreShared bool `yaml:"store_shared"`
		// Prefix is put before every object key (default "history").
		Prefix string `yaml:"prefix"`
		// After: conv_msg rows older than this go cold (default 4320h,
		// 180 days); DeleteAfter: their warm rows are deleted this long
		// after their file is catalogued (default 168h, 7 days).
		After       time.Duration `yaml:"after"`
		DeleteAfter time.Duration `yaml:"delete_after"`
		// Rate: rows per second per shard, read and deleted (default 2000;
		// negative: unlimited).
		Rate float64 `yaml:"rate"`
		// KeepNewest: a conversation's newest rows that are never
		// archived however old (default 500, the hot tier's share: the
		// first screen stays in MySQL; negative: none).
		KeepNewest int `yaml:"keep_newest"`
		// EraseAfter: archived rows deleted through Convoy (hidden at
		// once) are rewritten out of their files by the first archive run
		// this long after the delete (default 24h; a day's file is then
		// rewritten once for many deletes).
		EraseAfter time.Duration `yaml:"erase_after"`
		// Retention: cold files of days older than this are deleted with
		// their rows, which then read as deleted (default 0: kept for
		// ever; must be longer than after).
		Retention time.Duration `yaml:"retention"`
		// InboxAfter: im_inbox rows already read (seq <= the member's
		// last_read_seq) and older than this are archived (default 720h,
		// 30 days), and deleted delete_after later.
		InboxAfter time.Duration `yaml:"inbox_after"`
		// Budget bounds the cold part of one history read (default
		// 800ms): what arrived in time is returned, with a warning naming
		// where to continue.
		Budget time.Duration `yaml:"budget"`
		// Partial is what a history read whose archived part is
		// incomplete returns by default: "warning" (the rows found and
		// warning 1931, the default) or "error" (1969, SQLSTATE 70100,
		// naming where to continue). A session chooses its own with SET
		// convoy_cold_partial.
		Partial string `yaml:"partial"`
	} `yaml:"cold"`

	// Health holds the expansion triggers of SHOW SHARD HEALTH
	// (docs/design.md §7).
	Health struct {
		StatsWindow  time.Duration    `yaml:"stats_window"`  // default 60s
		ShardQPS     float64          `yaml:"shard_qps"`     // default 3000
		WriteP99     time.Duration    `yaml:"write_p99"`     // default 50ms
		DiskPercent  float64          `yaml:"disk_percent"`  // default 60
		DiskCapacity map[string]int64 `yaml:"disk_capacity"` // bytes per datasource
	} `yaml:"health"`
}

// UserConfig is one client account. The password comes from exactly one of
// password, password_env or password_file; prefer the last two outside
// development.
type UserConfig struct {
	Name         string `yaml:"name"`
	Password     string `yaml:"password"`
	PasswordEnv  string `yaml:"password_env"`
	PasswordFile string `yaml:"password_file"`
	Admin        bool   `yaml:"admin"`
	// Privileges: read, write, ddl, admin or all; empty: read, write and
	// ddl (plus admin when admin is true).
	Privileges []string `yaml:"privileges"`
	// Databases the account may use; empty: any.
	Databases []string `yaml:"databases"`
	// Txn is the account's default convoy_txn: single (one shard per
	// transaction, the default) or outbox (docs/design.md §12).
	Txn string `yaml:"txn"`
}

func defaultConfig() Config {
	var c Config
	c.Listen = "127.0.0.1:3307"
	c.MetricsListen = "127.0.0.1:9104"
	c.LogLevel = "info"
	c.LogFormat = "json"
	c.Etcd.Endpoints = []string{"127.0.0.1:2379"}
	c.Etcd.Cluster = "default"
	c.Etcd.DialTimeout = 3 * time.Second
	c.Routes.Resync = 30 * time.Second
	// Well under the 30 s read timeout: a hung datasource must not hold a
	// client for long. A key set to 0 turns it off.
	c.Backend.StatementTimeout = 10 * time.Second
	c.Cold.Prefix = "history"
	c.Cold.Budget = 800 * time.Millisecond
	return c
}

func loadConfig(path string) (Config, error) {
	c := defaultConfig()
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("reading config: %w", err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		dec.KnownFields(true) // a misspelt key is an error, not a silent default
		if err := dec.Decode(&c); err != nil {
			return c, fmt.Errorf("config %s: %w", path, err)
		}
	}
	applyEnv(&c)
	switch c.Cold.Partial {
	case "", "warning", "error":
	default:
		return c, fmt.Errorf("config %s: cold.partial %q: want warning or error", path, c.Cold.Partial)
	}
	switch c.Engine.LocalInfile {
	case "", "sharded", "all", "off":
	default:
		return c, fmt.Errorf("config %s: engine.local_infile %q: want sharded, all or off", path, c.Engine.LocalInfile)
	}
	return c, nil
}

// applyEnv lets containers override the common settings without a file.
func applyEnv(c *Config) {
	if v := os.Getenv("CONVOY_LISTEN"); v != "" {
		c.Listen = v
	}
	if v := os.Getenv("CONVOY_METRICS_LISTEN"); v != "" {
		c.MetricsListen = v
	}
	if v := os.Getenv("CONVOY_ETCD_ENDPOINTS"); v != "" {
		c.Etcd.Endpoints = strings.Split(v, ",")
	}
	if v := os.Getenv("CONVOY_CLUSTER"); v != "" {
		c.Etcd.Cluster = v
	}
	if v := os.Getenv("CONVOY_LOG_LEVEL"); v != "" {
		c.LogLevel = v
	}
	if v := os.Getenv("CONVOY_LOG_FORMAT"); v != "" {
		c.LogFormat = v
	}
	if v := os.Getenv("CONVOY_MIGRATION_RUN_JOBS"); v != "" {
		on := v != "false" && v != "0"
		c.Migration.RunJobs = &on
	}
}

func (u UserConfig) password() (string, error) {
	return secret("user "+u.Name, u.Password, u.PasswordEnv, u.PasswordFile)
}

// secret resolves a password given inline, as an environment variable's
// name or as a file's path (at most one of them; trailing newlines of a
// file are not part of it). what names the setting in errors.
func secret(what, inline, env, file string) (string, error) {
	n := 0
	for _, s := range []string{inline, env, file} {
		if s != "" {
			n++
		}
	}
	if n > 1 {
		return "", fmt.Errorf("%s: set only one of password, password_env, password_file", what)
	}
	switch {
	case env != "":
		v, ok := os.LookupEnv(env)
		if !ok {
			return "", fmt.Errorf("%s: environment variable %s is not set", what, env)
		}
		return v, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	return inline, nil
}
