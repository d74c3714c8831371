package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/migrate"
	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/proxy/directive"
	"github.com/convoy-im/convoy/proxy/engine"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

var _ engine.MigrationAdmin = (*migrate.Admin)(nil)

const migrateUsage = `usage: convoy migrate [--config FILE] [--etcd HOST:PORT,...] [--cluster NAME] COMMAND
  start SHARD[-LAST] DATASOURCE [DATABASE d] [RATE r] [PARALLEL p] [AUTO]
  plan --to FILE [--rate R] [--parallel P] [--each]
                              the shard moves from the live routes to the route
                              document FILE (e.g. convoy plan --out), their rows
                              and bytes and the copy time at R rows/s per shard
                              (default: migration.rate), P shards at once (8);
                              --each: one line a shard, with its tables
  apply --to FILE [RATE r] [PARALLEL p] [AUTO]
                              adds FILE's new datasources to the live routes and
                              starts one job per move (as start does); run again,
                              it skips shards already placed or with a job
  status                      one row per job (the columns of SHOW MIGRATIONS)
  watch SHARD                 a live progress line until the job is done or gone
  next|pause|resume|rollback|cancel|purge SHARD
  rate SHARD ROWS_PER_SEC     0: unlimited
  worker                      run migration jobs here (as every convoy serve does)
`

// migrationManager starts the process's migration manager (runner
// hosting); reg (nil: none) gets its job metrics.
func migrationManager(cli *clientv3.Client, c Config, id string, log *zap.Logger, reg prometheus.Registerer, lockMetrics *routecfg.LockMetrics) (*migrate.Manager, error) {
	metrics, err := migrate.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	return migrate.NewManager(migrate.ManagerConfig{
		Client: cli, Cluster: c.Etcd.Cluster, ID: id, Connect: migrationConnector, Log: log,
		RollbackWindow: c.Migration.RollbackWindow, Rate: c.Migration.Rate, Metrics: metrics, LockMetrics: lockMetrics,
	})
}

// migrationConnector opens a datasource for the migration jobs: the pool
// backend.OpenSQL makes for non-client work (password, TLS, the driver
// options migrate needs) and the binlog connection with the same account
// and TLS (preferred mode streams in clear text: the binlog client cannot
// read the server's greeting before it decides).
func migrationConnector(_ context.Context, ds router.Datasource) (*sql.DB, binlog.Config, error) {
	db, err := backend.OpenSQL(ds, "")
	if err != nil {
		return nil, binlog.Config{}, err
	}
	pw, err := backend.ResolvePassword(ds)
	if err != nil {
		db.Close()
		return nil, binlog.Config{}, err
	}
	tc, err := backend.TLSConfig(ds)
	if err != nil {
		db.Close()
		return nil, binlog.Config{}, err
	}
	return db, binlog.Config{Addr: ds.Addr, User: ds.User, Password: pw, TLS: tc}, nil
}

func migrateCmd(args []string) error {
	f := newFlags("migrate")
	f.fs.Usage = func() { fmt.Fprint(os.Stderr, migrateUsage) }
	if err := f.fs.Parse(args); err != nil {
		return err
	}
	c, err := f.load()
	if err != nil {
		return err
	}
	rest := f.fs.Args()
	if len(rest) == 0 {
		return errors.New(migrateUsage)
	}
	cli, err := etcdClient(c, zap.NewNop())
	if err != nil {
		return err
	}
	defer cli.Close()
	admin := migrate.NewAdmin(cli, c.Etcd.Cluster)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch cmd, args := strings.ToLower(rest[0]), rest[1:]; cmd {
	case "status":
		cols, rows, err := admin.Status(ctx)
		if err != nil {
			return err
		}
		printTable(os.Stdout, cols, rows)
		return nil
	case "watch":
		if len(args) != 1 {
			return errors.New(migrateUsage)
		}
		shard, err := strconv.Atoi(args[0])
		if err != nil {
			return fmt.Errorf("shard %q: %w", args[0], err)
		}
		return watchMigration(ctx, admin, shard, os.Stdout)
	case "plan":
		return layoutPlan(ctx, admin, args, c.Migration.Rate, os.Stdout)
	case "apply":
		return layoutApply(ctx, admin, args, os.Stdout)
	case "worker":
		log, err := newLogger(c.LogLevel, c.LogFormat, zapcore.Lock(os.Stderr))
		if err != nil {
			return err
		}
		hostname, _ := os.Hostname()
		m, err := migrationManager(cli, c, fmt.Sprintf("%s-%d-worker", hostname, os.Getpid()), log.Named("migrate"), nil, nil)
		if err != nil {
			return err
		}
		log.Info("migration worker running", zap.String("cluster", c.Etcd.Cluster))
		<-ctx.Done()
		return m.Close()
	}
	d, err := cliDirective(strings.ToLower(rest[0]), rest[1:])
	if err != nil {
		return err
	}
	if d.Kind == directive.MigrateShard {
		shards, err := admin.Start(ctx, d.Shard, d.LastShard, d.Datasource, d.Database, d.MigrationRate(), d.Parallel, d.Auto)
		if len(shards) > 0 {
			fmt.Printf("created migration jobs for %d shard(s): %d..%d\n", len(shards), shards[0], shards[len(shards)-1])
		}
		return err
	}
	return admin.Command(ctx, d.Shard, d.Verb, d.MigrationRate())
}

// cliDirective reads `start ...` and the job commands with the directive
// grammar, so the shell and SQL take the same words:
//
//	start 441 ds2 DATABASE im_9     = MIGRATE SHARD 441 TO ds2 DATABASE im_9
//	start 512-1023 ds2 PARALLEL 4   = MIGRATE SHARDS 512-1023 TO ds2 PARALLEL 4
//	next 441                        = MIGRATION 441 NEXT
//	rate 441 500                    = MIGRATION 441 RATE 500
func cliDirective(cmd string, args []string) (*directive.Directive, error) {
	var body string
	switch {
	case cmd == "start" && len(args) >= 2:
		kind := "SHARD"
		if strings.Contains(args[0], "-") {
			kind = "SHARDS"
		}
		rest := args[1:]
		if strings.EqualFold(rest[0], "to") {
			rest = rest[1:]
		}
		body = "MIGRATE " + kind + " " + args[0] + " TO " + strings.Join(rest, " ")
	case cmd == "rate" && len(args) == 2:
		body = "MIGRATION " + args[0] + " RATE " + args[1]
	case cmd != "start" && cmd != "rate" && len(args) == 1:
		body = "MIGRATION " + args[0] + " " + cmd
	default:
		return nil, fmt.Errorf("migrate %s: wrong arguments\n%s", cmd, migrateUsage)
	}
	d, _, err := directive.Parse("/*+ convoy " + body + " */")
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, migrateUsage)
	}
	return d, nil
}

func printTable(w io.Writer, cols []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// watchMigration prints the shard's job as one line, rewritten in place on
// a terminal (appended otherwise), until the job is done or gone.
func watchMigration(ctx context.Context, admin *migrate.Admin, shard int, w *os.File) error {
	fi, _ := w.Stat()
	tty := fi != nil && fi.Mode()&os.ModeCharDevice != 0
	want := router.Shard(shard).String()
	col := map[string]int{}
	for i, c := range migrate.StatusColumns {
		col[c] = i
	}
	for {
		_, rows, err := admin.Status(ctx)
		if err != nil {
			return err
		}
		var row []string
		for _, r := range rows {
			if r[0] == want {
				row = r
			}
		}
		if row == nil {
			fmt.Fprintf(w, "\nshard %d has no migration job (rolled back, or never started)\n", shard)
			return nil
		}
		line := fmt.Sprintf("shard %s %s -> %s  %-22s rows %s  %s rows/s  eta %s  lag %s  %s  %s",
			row[0], row[col["from"]], row[col["to"]], row[col["step"]], row[col["rows"]], row[col["rows_per_sec"]],
			row[col["eta"]], row[col["apply_lag"]], row[col["checksum"]], row[col["last_error"]])
		if tty {
			fmt.Fprintf(w, "\r\033[K%s", line)
		} else {
			fmt.Fprintln(w, line)
		}
		if strings.HasPrefix(row[col["step"]], migrate.StepDone) {
			fmt.Fprintln(w)
			return nil
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(w)
			return nil
		case <-time.After(time.Second):
		}
	}
}

// dualWrites hands the engine's mirrored rows to the migration's
// dual-write (the engine names its own types; migrate does not import it).
type dualWrites struct{ *migrate.DualWrites }

func (d dualWrites) Mirror(sh router.Shard, writes []engine.MirrorRows) {
	rows := make([]migrate.TableRows, len(writes))
	for i, w := range writes {
		rows[i] = migrate.TableRows(w)
	}
	d.DualWrites.Mirror(sh, rows)
}
