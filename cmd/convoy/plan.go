package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/planner"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
	"github.com/convoy-im/convoy/shardmap"
)

const planUsage = `usage: convoy plan [--config FILE] [--etcd HOSTS] [--cluster NAME] [--rate N] [--parallel N] [--out FILE]
       convoy plan --simulate [--messages-per-day N] [--history-days N] [--hot-share F] [--hot-shards N]
                   [--datasources N] [--databases N] [--disk-gib N] [--rate N] [--parallel N] [--out FILE]

Evaluates the expansion triggers of docs/design.md §7 (disk > 60 %, write
P99 > 50 ms, shard QPS > 3000, 50 M rows / 100 GB per table), says which
fires first and when, and proposes the next layout with its shard moves and
their copy time.
--out writes the proposed route document (fill in the new servers' addresses,
then convoy migrate plan|apply --to FILE). Measured mode reads the routes from
etcd, sizes from the datasources' statistics, load from every live proxy's
shard map (/api/map), disk capacities from health.disk_capacity and growth
from the daily size samples the proxies keep in etcd.
`

func plan(args []string) error {
	f := newFlags("plan")
	sim := f.fs.Bool("simulate", false, "run the model on a synthetic workload instead of the fleet")
	w := planner.SeedWorkload()
	f.fs.Float64Var(&w.MessagesPerDay, "messages-per-day", w.MessagesPerDay, "simulate: messages written a day")
	f.fs.Float64Var(&w.HistoryDays, "history-days", w.HistoryDays, "simulate: days of messages already stored")
	f.fs.Float64Var(&w.HotShare, "hot-share", w.HotShare, "simulate: share of the traffic on the hot shards")
	f.fs.IntVar(&w.HotShards, "hot-shards", w.HotShards, "simulate: number of hot shards")
	f.fs.IntVar(&w.Datasources, "datasources", w.Datasources, "simulate: database servers")
	f.fs.IntVar(&w.Databases, "databases", w.Databases, "simulate: databases (8 = the 8 x 128 layout)")
	diskGiB := f.fs.Int64("disk-gib", w.DiskBytes>>30, "simulate: usable disk per server, GiB")
	rate := f.fs.Float64("rate", 2000, "migration copy rate per shard, rows/s")
	parallel := f.fs.Int("parallel", 8, "shards copied at once")
	out := f.fs.String("out", "", "write the proposed route document (JSON) to this file")
	f.fs.Usage = func() { fmt.Fprint(os.Stderr, planUsage); f.fs.PrintDefaults() }
	if err := f.fs.Parse(args); err != nil {
		return err
	}
	limits := planner.SeedLimits()
	var in planner.Inputs
	var err error
	if *sim {
		w.DiskBytes = *diskGiB << 30
		in, err = w.Inputs(limits, *rate, *parallel)
	} else {
		in, err = measure(f, limits, *rate, *parallel)
	}
	if err != nil {
		return err
	}
	return report(os.Stdout, in, *out)
}

func measure(f commonFlags, limits planner.Limits, rate float64, parallel int) (planner.Inputs, error) {
	c, err := f.load()
	if err != nil {
		return planner.Inputs{}, err
	}
	cli, err := etcdClient(c, zap.NewNop())
	if err != nil {
		return planner.Inputs{}, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return measureFleet(ctx, cli, c, limits, rate, parallel, func(msg string) { fmt.Fprintln(os.Stderr, "convoy plan: "+msg) })
}

// measureFleet builds the planner's inputs from the fleet: the routes in
// etcd, the datasources' statistics, every live proxy's load, the daily
// size samples and the configured thresholds and disk capacities. note
// is told what could not be read.
func measureFleet(ctx context.Context, cli *clientv3.Client, c Config, limits planner.Limits, rate float64, parallel int, note func(string)) (planner.Inputs, error) {
	if c.Health.DiskPercent > 0 {
		limits.DiskPercent = c.Health.DiskPercent
	}
	if c.Health.ShardQPS > 0 {
		limits.ShardQPS = c.Health.ShardQPS
	}
	if c.Health.WriteP99 > 0 {
		limits.WriteP99 = c.Health.WriteP99
	}
	doc, err := routecfg.NewStore(cli, c.Etcd.Cluster).Get(ctx)
	if err != nil {
		return planner.Inputs{}, err
	}
	snap, err := router.NewSnapshot(doc)
	if err != nil {
		return planner.Inputs{}, err
	}
	proxies, err := coord.ListProxies(ctx, cli, c.Etcd.Cluster)
	if err != nil {
		return planner.Inputs{}, err
	}
	var loads [][router.NumShards]planner.Load
	for _, p := range proxies {
		l, err := proxyLoad(ctx, p.Metrics)
		if err != nil {
			note(fmt.Sprintf("load of proxy %s not read (%v); its traffic is left out", p.ID, err))
			continue
		}
		loads = append(loads, l)
	}
	samples, err := coord.SizeSamples(ctx, cli, c.Etcd.Cluster)
	if err != nil {
		return planner.Inputs{}, err
	}
	in, err := planner.Measure(ctx, snap, planner.InformationSchemaStats, loads, c.Health.DiskCapacity, samples)
	in.Limits, in.Rate, in.Parallel = limits, rate, parallel
	return in, err
}

// proxyLoad reads one proxy's shard statistics from its shard map API.
func proxyLoad(ctx context.Context, addr string) ([router.NumShards]planner.Load, error) {
	var out [router.NumShards]planner.Load
	if addr == "" {
		return out, errors.New("no metrics address registered")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/map", nil)
	if err != nil {
		return out, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	var m shardmap.Map
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&m); err != nil {
		return out, err
	}
	for i, s := range m.Shards {
		out[i] = planner.Load{QPS: s.QPS, WriteP99: time.Duration(s.WriteP99 * float64(time.Millisecond))}
	}
	return out, nil
}

func report(w io.Writer, in planner.Inputs, outFile string) error {
	ts := planner.Evaluate(in)
	fmt.Fprintln(w, "Expansion triggers, soonest first:")
	for _, t := range ts {
		fmt.Fprintln(w, "  "+t.String())
	}
	p, err := planner.Propose(in, ts)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nProposal: %s: %s\n\n", p.Kind, p.Why)
	if p.Kind == "none" {
		return nil
	}
	if err := p.Moves.Write(w); err != nil {
		return err
	}
	if outFile != "" {
		b, _ := json.MarshalIndent(p.Routes, "", "  ")
		if err := os.WriteFile(outFile, append(b, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(w, "\nproposed route document written to %s: replace the NEW-... addresses, then convoy migrate apply --to %[1]s\n", outFile)
	}
	return nil
}
