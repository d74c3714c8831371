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
	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/migrate"
	"github.com/convoy-im/convoy/migrate/inproxy"
	"github.com/convoy-im/convoy/proxy/admin"
	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/proxy/directive"
	"github.com/convoy-im/convoy/proxy/engine"
	"github.com/convoy-im/convoy/router"
)

var _ admin.MigrationAdmin = (*migrate.Admin)(nil)

const migrateUsage = `usage: convoy migrate [--config FILE] [--etcd HOST:PORT,...] [--cluster NAME] COMMAND
  start SHARD[-LAST] DATASOURCE [DATABASE d] [RATE r] [PARALLEL p] [AUTO] [--watch]
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
  status [SHARD] [--watch]    one row per job (the columns of SHOW MIGRATIONS),
                              or one job's fields, one row each (SHOW MIGRATION N);
                              --watch: the table again every second
  watch SHARD                 a live progress line (rows, rows/s, ETA, lag) until
                              the job is done or gone
  next|pause|resume|rollback|cancel|purge SHARD [--watch]
                              --watch (also on start): then the live progress
                              line until the job rests at its next step (start:
                              ready; next: switched) or is done or gone
  rate SHARD ROWS_PER_SEC     0: unlimited
  worker                      run migration jobs here (as every convoy serve does)
`

// migrationManager starts the process's migration manager (runner
// hosting); reg (nil: none) gets its job metrics.
func migrationManager(cli *clientv3.Client, c Config, id string, log *zap.Logger, reg prometheus.Registerer, lockMetrics *coord.LockMetrics) (*migrate.Manager, error) {
	metrics, err := migrate.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	return migrate.NewManager(migrate.ManagerConfig{
		Client: cli, Cluster: c.Etcd.Cluster, ID: id, Connect: migrationConnector, Log: log,
		RollbackWindow: c.Migration.RollbackWindow, Rate: c.Migration.Rate, RunnerTTL: c.Migration.RunnerTTL,
		ThrottleWriteP99: c.Migration.ThrottleWriteP99,
		Metrics:          metrics, LockMetrics: lockMetrics,
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
	c, rest, err := subcommand("migrate", migrateUsage, args)
	if err != nil {
		return err
	}
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
	args, watch := watchFlag(rest[1:])
	tty := isTerminal(os.Stdout)
	switch cmd := strings.ToLower(rest[0]); cmd {
	case "status":
		if len(args) == 1 && !watch {
			shard, err := strconv.Atoi(args[0])
			if err != nil {
				return errors.New(migrateUsage)
			}
			cols, rows, err := admin.Detail(ctx, shard)
			if err != nil {
				return err
			}
			printTable(os.Stdout, cols, rows)
			return nil
		}
		if watch {
			return watchStatus(ctx, admin.Status, os.Stdout, tty, watchEvery)
		}
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
		return watchMigration(ctx, admin.Status, shard, os.Stdout, tty, watchEvery)
	case "plan":
		return layoutPlan(ctx, admin, args, c.Migration.Rate, os.Stdout)
	case "apply":
		return layoutApply(ctx, admin, args, os.Stdout)
	case "worker":
		log, err := newLogger(c.LogLevel, c.LogFormat, zapcore.Lock(os.Stderr))
		if err != nil {
			return err
		}
		return migrationWorker(ctx, cli, c, log)
	}
	d, err := cliDirective(strings.ToLower(rest[0]), args)
	if err != nil {
		return err
	}
	if d.Kind == directive.MigrateShard {
		shards, err := admin.Start(ctx, d.Shard, d.LastShard, d.Datasource, d.Database, d.MigrationRate(), d.Parallel, d.Auto)
		if len(shards) > 0 {
			fmt.Printf("created migration jobs for %d shard(s): %d..%d\n", len(shards), shards[0], shards[len(shards)-1])
		}
		if err != nil || !watch {
			return err
		}
		if len(shards) == 1 {
			return watchMigration(ctx, admin.Status, shards[0], os.Stdout, tty, watchEvery)
		}
		return watchStatus(ctx, admin.Status, os.Stdout, tty, watchEvery)
	}
	if err := admin.Command(ctx, d.Shard, d.Verb, d.MigrationRate()); err != nil || !watch {
		return err
	}
	return watchMigration(ctx, admin.Status, d.Shard, os.Stdout, tty, watchEvery)
}

// migrationWorker runs migration jobs in this process (whichever wins a
// job's runner election, as in every convoy serve) until ctx ends, with
// the job and lock metrics on metrics_listen like a proxy's.
func migrationWorker(ctx context.Context, cli *clientv3.Client, c Config, log *zap.Logger) error {
	users, err := configUsers(c)
	if err != nil {
		return err
	}
	reg := newRegistry()
	lockMetrics, err := coord.NewLockMetrics(reg, c.Etcd.Cluster)
	if err != nil {
		return err
	}
	hostname, _ := os.Hostname()
	m, err := migrationManager(cli, c, fmt.Sprintf("%s-%d-worker", hostname, os.Getpid()), log.Named("migrate"), reg, lockMetrics)
	if err != nil {
		return err
	}
	defer m.Close()
	if c.MetricsListen != "" {
		hl, err := newHTTPListener(c, reg, users, log)
		if err != nil {
			return err
		}
		defer hl.Close()
	}
	log.Info("migration worker running", zap.String("cluster", c.Etcd.Cluster), zap.String("metrics", c.MetricsListen))
	<-ctx.Done()
	return nil
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

// statusFunc is Admin.Status: StatusColumns and one row per job.
type statusFunc func(context.Context) ([]string, [][]string, error)

// watchEvery paces the progress line (the runner refreshes its status
// every 2 s; the rows/s between refreshes are the runner's own).
const watchEvery = time.Second

// watchMigration prints the progress line of shard's job (rows, rows/s,
// ETA, apply lag, checksum, last error) every `every`, rewritten in place
// on a terminal, one line each otherwise. It returns when the job is done
// or gone, or when it came to rest at a step other than the one it was at
// first (ready or switched: the step that waits for a command, whose next
// command the last line names), so `start --watch` follows a job to ready
// and `next --watch` to switched.
func watchMigration(ctx context.Context, status statusFunc, shard int, w io.Writer, tty bool, every time.Duration) error {
	want := router.Shard(shard).String()
	col := map[string]int{}
	for i, c := range migrate.StatusColumns {
		col[c] = i
	}
	first := ""
	end := func(format string, args ...any) error {
		if tty {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, format+"\n", args...)
		return nil
	}
	for {
		_, rows, err := status(ctx)
		if err != nil {
			if tty {
				fmt.Fprintln(w)
			}
			return err
		}
		var row []string
		for _, r := range rows {
			if r[0] == want {
				row = r
			}
		}
		if row == nil {
			return end("shard %d has no migration job (rolled back, cancelled, or never started)", shard)
		}
		step := row[col["step"]]
		line := fmt.Sprintf("shard %s %s -> %s  %-22s rows %s  %s rows/s  eta %s  lag %s  %s  %s",
			row[0], row[col["from"]], row[col["to"]], step, row[col["rows"]], row[col["rows_per_sec"]],
			row[col["eta"]], row[col["apply_lag"]], row[col["checksum"]], row[col["last_error"]])
		if tty {
			fmt.Fprintf(w, "\r\033[K%s", line)
		} else {
			fmt.Fprintln(w, line)
		}
		if first == "" {
			first = step
		}
		switch {
		case strings.HasPrefix(step, migrate.StepDone):
			return end("shard %d: migration done", shard)
		case step != first && step == migrate.StepReady:
			return end("shard %d is ready: `convoy migrate next %d` switches its writes (the directive MIGRATION %d READ PERCENT p ramps reads first)", shard, shard, shard)
		case step != first && step == migrate.StepSwitched:
			return end("shard %d switched: `convoy migrate rollback %d` switches back until the rollback window ends; `convoy migrate next %d` ends it now", shard, shard, shard)
		}
		select {
		case <-ctx.Done():
			return end("")
		case <-time.After(every):
		}
	}
}

// watchStatus prints the status table every `every` (redrawn on a
// terminal) until no job is left or ctx ends.
func watchStatus(ctx context.Context, status statusFunc, w io.Writer, tty bool, every time.Duration) error {
	for {
		cols, rows, err := status(ctx)
		if err != nil {
			return err
		}
		if tty {
			fmt.Fprint(w, "\033[H\033[2J")
		}
		fmt.Fprintf(w, "%s  %d job(s)\n", time.Now().Format(time.TimeOnly), len(rows))
		printTable(w, cols, rows)
		if len(rows) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
		if !tty {
			fmt.Fprintln(w)
		}
	}
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// watchFlag removes --watch / -w from args and reports whether it was
// there.
func watchFlag(args []string) ([]string, bool) {
	out := args[:0:0]
	found := false
	for _, a := range args {
		if a == "--watch" || a == "-w" {
			found = true
			continue
		}
		out = append(out, a)
	}
	return out, found
}

// dualWrites hands the engine's mirrored rows to the migration's
// dual-write (the engine names its own types; inproxy does not import it).
type dualWrites struct{ *inproxy.DualWrites }

func (d dualWrites) Mirror(sh router.Shard, writes []engine.MirrorRows, commit string) {
	rows := make([]inproxy.TableRows, len(writes))
	for i, w := range writes {
		rows[i] = inproxy.TableRows(w)
	}
	d.DualWrites.Mirror(sh, rows, commit)
}
