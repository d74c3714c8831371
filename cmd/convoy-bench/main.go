// Command convoy-bench is an IM workload generator for any MySQL DSN (Convoy,
// plain MariaDB holding the logical tables, or anything in between), plus a
// bare TCP relay used as the "one extra hop" reference.
//
//	convoy-bench --dsn 'convoy:convoy@tcp(127.0.0.1:3307)/im' --prepare
//	convoy-bench --dsn ... --conns 16 --duration 10s --mode prepared --mix first=50,send=10,scroll=20,catchup=10,jump=5,inbox=5
//	convoy-bench --dsn 'root@tcp(127.0.0.1:13306)/imflat' --explicit-seq --mix send=100
//	convoy-bench relay --listen 127.0.0.1:13320 --to 127.0.0.1:13306
//
// Live progress goes to stderr once a second; the final table (or --json)
// to stdout.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "relay" {
		// It serves until it fails.
		fmt.Fprintln(os.Stderr, "relay:", runRelay(os.Args[2:]))
		os.Exit(1)
	}
	if err := runBench(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "convoy-bench:", err)
		os.Exit(1)
	}
}

// options are the workload flags.
type options struct {
	dsn         string
	conns       int
	duration    time.Duration
	count       int64
	warmup      time.Duration
	mode        string
	mix         string
	convs       int
	convBase    uint64
	msgs        int
	huge        int
	hugeMsgs    int
	hugeShare   float64
	zipfS       float64
	users       int
	uidBase     uint64
	prepare     bool
	prepOnly    bool
	batch       int
	explicitSeq bool
	jsonOut     bool
	seed        uint64
	quiet       bool
	label       string
	physical    string // name=DSN,...: client-side sharding (see physical.go)
	physDBs     int
	phys        *physical
}

func runBench(args []string) error {
	var o options
	fs := flag.NewFlagSet("convoy-bench", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: convoy-bench [flags]            IM workload over a MySQL DSN
       convoy-bench relay --listen ADDR --to ADDR   bare TCP relay

operations for --mix (name=weight, comma separated):
  send      INSERT conv_msg (seq allocated by Convoy, or --explicit-seq) + INSERT msg_content
  first     newest history page: seq < 2^62 ORDER BY seq DESC LIMIT 20
  scroll    an older page: seq < cursor a few pages down, LIMIT 20
  catchup   seq > cursor ORDER BY seq ASC LIMIT 50
  jump      conv_id = ? AND msg_id = ?
  inbox     im_inbox WHERE uid = ? ORDER BY conv_id, seq DESC LIMIT 50
  convlist  im_conv_member WHERE uid = ? ORDER BY updated_at DESC LIMIT 50
  point     conv_msg WHERE conv_id = ? AND seq = ?

flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.dsn, "dsn", "convoy:convoy@tcp(127.0.0.1:3307)/im", "go-sql-driver DSN (collation=utf8mb4_general_ci is always set)")
	fs.IntVar(&o.conns, "conns", 16, "client connections, one worker each")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured run time (ignored when --count is set)")
	fs.Int64Var(&o.count, "count", 0, "stop after this many operations in total (0: use --duration)")
	fs.DurationVar(&o.warmup, "warmup", 0, "run this long before measuring (not recorded)")
	fs.StringVar(&o.mode, "mode", "text", "text (interpolateParams=true) or prepared (server-side statements, prepared once per connection)")
	fs.StringVar(&o.mix, "mix", "first=50,scroll=15,catchup=10,send=10,jump=5,inbox=5,convlist=5", "operation weights")
	fs.IntVar(&o.convs, "convs", 2000, "number of ordinary conversations (Zipf popularity)")
	fs.Uint64Var(&o.convBase, "conv-base", 1_000_000, "first conversation id")
	fs.IntVar(&o.msgs, "msgs", 50, "messages per ordinary conversation (--prepare, and the assumed newest seq)")
	fs.IntVar(&o.huge, "huge", 3, "number of huge groups")
	fs.IntVar(&o.hugeMsgs, "huge-msgs", 1000, "messages per huge group")
	fs.Float64Var(&o.hugeShare, "huge-share", 0.2, "share of conversation traffic that goes to the huge groups")
	fs.Float64Var(&o.zipfS, "zipf-s", 1.1, "Zipf exponent s (> 1) of conversation popularity")
	fs.IntVar(&o.users, "users", 2000, "number of users (inbox / convlist keys)")
	fs.Uint64Var(&o.uidBase, "uid-base", 5_000_000, "first user id")
	fs.BoolVar(&o.prepare, "prepare", false, "create the data set first (idempotent), then run")
	fs.BoolVar(&o.prepOnly, "prepare-only", false, "create the data set and exit")
	fs.IntVar(&o.batch, "batch", 500, "rows per multi-row INSERT when preparing")
	fs.BoolVar(&o.explicitSeq, "explicit-seq", false, "send computes seq itself (per-conversation counter seeded from MAX(seq)); for plain MySQL")
	fs.BoolVar(&o.jsonOut, "json", false, "final report as JSON on stdout")
	fs.Uint64Var(&o.seed, "seed", 0, "random seed (0: time based)")
	fs.BoolVar(&o.quiet, "quiet", false, "no live progress line")
	fs.StringVar(&o.label, "label", "", "free text copied into the report")
	fs.StringVar(&o.physical, "physical", "", "ds0=DSN,ds1=DSN: route conv_msg reads to their physical tables in the client (a baseline for the sharded layout; prepared mode prepares per physical table)")
	fs.IntVar(&o.physDBs, "physical-dbs", 8, "databases of the --physical layout (as convoy routes init --dbs)")
	fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.mode != "text" && o.mode != "prepared" {
		return fmt.Errorf("--mode must be text or prepared, not %q", o.mode)
	}
	if o.conns < 1 || o.convs < 1 || o.msgs < 1 || o.users < 1 {
		return fmt.Errorf("--conns, --convs, --msgs and --users must be >= 1")
	}
	if o.zipfS <= 1 {
		return fmt.Errorf("--zipf-s must be > 1")
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	mix, err := parseMix(o.mix)
	if err != nil {
		return err
	}
	if o.physical != "" {
		if o.prepare || o.prepOnly {
			return fmt.Errorf("--physical runs reads only (no --prepare)")
		}
		for i, wt := range mix {
			if wt > 0 && !physicalOps[opNames[i]] {
				return fmt.Errorf("--physical routes conv_msg reads only, not %s", opNames[i])
			}
		}
		if o.phys, err = openPhysical(o.physical, o.physDBs, o.conns, o.mode == "text"); err != nil {
			return err
		}
		defer o.phys.close()
	}
	dsn, err := buildDSN(o.dsn, o.mode == "text")
	if err != nil {
		return err
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(o.conns + 8)
	db.SetMaxIdleConns(o.conns + 8)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	ds := newDataset(&o)
	if o.prepare || o.prepOnly {
		if err := prepareData(ctx, db, ds, &o); err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
		if o.prepOnly {
			return nil
		}
	}
	rep, err := runWorkload(ctx, db, ds, mix, &o)
	if err != nil {
		return err
	}
	if o.jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printReport(os.Stdout, rep)
	return nil
}

// buildDSN forces the collation (the server otherwise falls back to latin1
// for the driver's default collation 255) and the protocol.
func buildDSN(dsn string, text bool) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", err
	}
	cfg.Collation = "utf8mb4_general_ci"
	cfg.InterpolateParams = text
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 30 * time.Second
	}
	return cfg.FormatDSN(), nil
}

var opNames = []string{"send", "first", "scroll", "catchup", "jump", "inbox", "convlist", "point"}

type opKind int

const (
	opSend opKind = iota
	opFirst
	opScroll
	opCatchup
	opJump
	opInbox
	opConvlist
	opPoint
	numOps
)

func parseMix(s string) ([]int, error) {
	w := make([]int, numOps)
	total := 0
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			val = "1"
		}
		idx := -1
		for i, n := range opNames {
			if n == strings.TrimSpace(name) {
				idx = i
			}
		}
		if idx < 0 {
			return nil, fmt.Errorf("--mix: unknown operation %q (have %s)", name, strings.Join(opNames, ", "))
		}
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("--mix: bad weight in %q", part)
		}
		w[idx] += n
		total += n
	}
	if total == 0 {
		return nil, fmt.Errorf("--mix: all weights are zero")
	}
	return w, nil
}

// opStats is one operation's shared counters (for the progress line) and
// its per-worker histograms (merged at the end).
type opStats struct {
	ops      atomic.Int64
	errs     atomic.Int64
	mu       sync.Mutex
	firstErr string
}

// OpReport is one row of the final report.
type OpReport struct {
	Op       string  `json:"op"`
	Count    uint64  `json:"count"`
	QPS      float64 `json:"qps"`
	MeanUS   float64 `json:"mean_us"`
	P50US    float64 `json:"p50_us"`
	P95US    float64 `json:"p95_us"`
	P99US    float64 `json:"p99_us"`
	MaxUS    float64 `json:"max_us"`
	Errors   int64   `json:"errors"`
	FirstErr string  `json:"first_error,omitempty"`
}

// Report is the final report (--json prints it as is).
type Report struct {
	Label     string     `json:"label,omitempty"`
	Target    string     `json:"target"`
	Mode      string     `json:"mode"`
	Conns     int        `json:"conns"`
	Mix       string     `json:"mix"`
	Seconds   float64    `json:"seconds"`
	Ops       []OpReport `json:"ops"`
	Total     OpReport   `json:"total"`
	StartedAt time.Time  `json:"started_at"`
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

func runWorkload(ctx context.Context, db *sql.DB, ds *dataset, mix []int, o *options) (*Report, error) {
	stats := make([]*opStats, numOps)
	for i := range stats {
		stats[i] = &opStats{}
	}
	// Connect and prepare every worker before the clock starts.
	workers := make([]*worker, o.conns)
	for i := range workers {
		w, err := newWorker(ctx, db, ds, mix, o, i)
		if err != nil {
			for _, w := range workers[:i] {
				w.close()
			}
			return nil, fmt.Errorf("worker %d: %w", i, err)
		}
		workers[i] = w
	}
	defer func() {
		for _, w := range workers {
			w.close()
		}
	}()

	var (
		recording atomic.Bool
		remaining atomic.Int64
	)
	remaining.Store(o.count)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func(w *worker) {
			defer wg.Done()
			for runCtx.Err() == nil {
				rec := recording.Load()
				if rec && o.count > 0 && remaining.Add(-1) < 0 {
					cancel()
					return
				}
				op := w.pick()
				t0 := time.Now()
				err := w.do(runCtx, op)
				d := time.Since(t0)
				if !rec {
					continue
				}
				if err != nil {
					if runCtx.Err() != nil {
						return // cut off by the end of the run, not a failure
					}
					st := stats[op]
					st.errs.Add(1)
					st.mu.Lock()
					if st.firstErr == "" {
						st.firstErr = err.Error()
					}
					st.mu.Unlock()
					continue
				}
				w.hists[op].record(d)
				stats[op].ops.Add(1)
			}
		}(w)
	}
	if o.warmup > 0 {
		select {
		case <-time.After(o.warmup):
		case <-ctx.Done():
		}
	}
	recording.Store(true)
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var end <-chan time.Time
	if o.count == 0 {
		end = time.After(o.duration)
	}
	var lastOps, lastErrs int64
	lastT := start
loop:
	for {
		select {
		case <-runCtx.Done():
			break loop
		case <-end:
			break loop
		case now := <-tick.C:
			if o.quiet {
				continue
			}
			var ops, errs int64
			var parts []string
			for i, st := range stats {
				n := st.ops.Load()
				ops += n
				errs += st.errs.Load()
				if mix[i] > 0 {
					parts = append(parts, fmt.Sprintf("%s %d", opNames[i], n))
				}
			}
			dt := now.Sub(lastT).Seconds()
			fmt.Fprintf(os.Stderr, "[%4.0fs] %8.0f ops/s  %6d errors (+%d)  total %d  (%s)\n",
				now.Sub(start).Seconds(), float64(ops-lastOps)/dt, errs, errs-lastErrs, ops, strings.Join(parts, ", "))
			lastOps, lastErrs, lastT = ops, errs, now
		}
	}
	elapsed := time.Since(start)
	cancel()
	wg.Wait()

	rep := &Report{Label: o.label, Target: redactDSN(o.dsn), Mode: o.mode, Conns: o.conns, Mix: o.mix, Seconds: elapsed.Seconds(), StartedAt: start}
	var total hist
	var totalErr int64
	for i := range numOps {
		var h hist
		for _, w := range workers {
			h.merge(&w.hists[i])
		}
		st := stats[i]
		if mix[i] == 0 && h.n == 0 && st.errs.Load() == 0 {
			continue
		}
		rep.Ops = append(rep.Ops, opReport(opNames[i], &h, elapsed, st.errs.Load(), st.firstErr))
		total.merge(&h)
		totalErr += st.errs.Load()
	}
	rep.Total = opReport("total", &total, elapsed, totalErr, "")
	return rep, nil
}

func opReport(name string, h *hist, elapsed time.Duration, errs int64, firstErr string) OpReport {
	return OpReport{
		Op: name, Count: h.n, QPS: float64(h.n) / elapsed.Seconds(),
		MeanUS: us(h.mean()), P50US: us(h.quantile(0.50)), P95US: us(h.quantile(0.95)), P99US: us(h.quantile(0.99)),
		MaxUS: us(time.Duration(h.max)), Errors: errs, FirstErr: firstErr,
	}
}

func redactDSN(dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%s@%s(%s)/%s", cfg.User, cfg.Net, cfg.Addr, cfg.DBName)
}

func printReport(f *os.File, r *Report) {
	fmt.Fprintf(f, "target %s  mode %s  conns %d  %.1fs  mix %s\n", r.Target, r.Mode, r.Conns, r.Seconds, r.Mix)
	fmt.Fprintf(f, "%-9s %10s %10s %9s %9s %9s %9s %7s  %s\n", "op", "count", "qps", "p50(us)", "p95(us)", "p99(us)", "max(us)", "errors", "first error")
	rows := append([]OpReport{}, r.Ops...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Count > rows[j].Count })
	rows = append(rows, r.Total)
	for _, x := range rows {
		fmt.Fprintf(f, "%-9s %10d %10.0f %9.0f %9.0f %9.0f %9.0f %7d  %s\n", x.Op, x.Count, x.QPS, x.P50US, x.P95US, x.P99US, x.MaxUS, x.Errors, x.FirstErr)
	}
}
