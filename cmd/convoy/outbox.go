package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/outbox"
	"github.com/convoy-im/convoy/proxy/admin"
	"github.com/convoy-im/convoy/proxy/engine"
	"github.com/convoy-im/convoy/router"
)

// outboxAdmin answers the outbox directives from the engine (the tables)
// and etcd (the elected workers).
type outboxAdmin struct {
	eng     *engine.Engine
	cli     *clientv3.Client
	cluster string
}

var _ admin.OutboxAdmin = outboxAdmin{}

func (o outboxAdmin) datasources() []string {
	var out []string
	for _, ds := range o.eng.Routes().Datasources() {
		out = append(out, ds.Name)
	}
	return out
}

func (o outboxAdmin) Status(ctx context.Context) ([]string, [][]any, error) {
	cols := []string{"datasource", "pending", "dead", "oldest_pending_seconds", "worker", "error"}
	var rows [][]any
	for _, ds := range o.datasources() {
		var worker any
		if w := o.worker(ctx, ds); w != "" {
			worker = w
		}
		// A datasource that does not answer is a row that says so: the
		// others' counts are what a DBA needs then.
		st, err := o.eng.OutboxSummary(ctx, ds)
		if err != nil {
			rows = append(rows, []any{ds, nil, nil, nil, worker, err.Error()})
			continue
		}
		var oldest any
		if st.Pending > 0 {
			oldest = strconv.FormatFloat(st.OldestPending.Seconds(), 'f', 3, 64)
		}
		rows = append(rows, []any{ds, st.Pending, st.Dead, oldest, worker, nil})
	}
	return cols, rows, nil
}

// worker is the process elected to deliver ds's entries ("": none).
func (o outboxAdmin) worker(ctx context.Context, ds string) string {
	resp, err := o.cli.Get(ctx, outbox.WorkersPrefix(o.cluster, ds), clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

func (o outboxAdmin) Dead(ctx context.Context) ([]string, [][]any, error) {
	cols := []string{"id", "target_shard", "rows", "tries", "last_error", "created_at"}
	var rows [][]any
	for _, ds := range o.datasources() {
		dead, err := o.eng.OutboxDeadLetters(ctx, ds, 1000)
		if err != nil {
			return nil, nil, fmt.Errorf("datasource %s: %w", ds, err)
		}
		for _, d := range dead {
			rows = append(rows, []any{d.ID, d.Target.String(), d.Rows, d.Tries, d.LastError, d.CreatedAt})
		}
	}
	return cols, rows, nil
}

func (o outboxAdmin) Retry(ctx context.Context, id string) error {
	return o.eng.OutboxResolve(ctx, id, true)
}

func (o outboxAdmin) Discard(ctx context.Context, id string) error {
	return o.eng.OutboxResolve(ctx, id, false)
}

// startOutbox starts this process's delivery workers (outbox.run_workers)
// and wires the engine's wake-up to them; the returned func stops them.
func startOutbox(c Config, cli *clientv3.Client, routes func() *router.Snapshot, eng *engine.Engine, id string, log *zap.Logger) func() {
	if c.Outbox.RunWorkers != nil && !*c.Outbox.RunWorkers {
		return func() {}
	}
	opt := engine.OutboxOptions{Batch: c.Outbox.Batch, MaxTries: c.Outbox.MaxTries}
	keep := c.Outbox.KeepMarkers
	if keep <= 0 {
		keep = 7 * 24 * time.Hour
	}
	r := outbox.StartRunners(outbox.RunnersConfig{
		Client: cli, Cluster: c.Etcd.Cluster, ID: id, TTL: c.Outbox.RunnerTTL, Poll: c.Outbox.Poll, Log: log,
		Datasources: func() []string {
			var out []string
			for _, ds := range routes().Datasources() {
				out = append(out, ds.Name)
			}
			return out
		},
		Deliver: func(ctx context.Context, ds string) (int, error) { return eng.DeliverOutbox(ctx, ds, opt) },
		Stopped: eng.OutboxStopped,
		Purge: func(ctx context.Context, ds string) error {
			n, err := eng.PurgeOutboxMarkers(ctx, ds, keep)
			if n > 0 {
				log.Info("purged old outbox markers", zap.String("datasource", ds), zap.Int64("markers", n))
			}
			return err
		},
	})
	eng.SetOutboxKick(r.Kick)
	return r.Close
}
