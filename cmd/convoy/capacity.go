package main

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/migrate"
	"github.com/convoy-im/convoy/planner"
	"github.com/convoy-im/convoy/router"
)

// capacityAdmin answers SHOW SHARD SIZES and PLAN EXPANSION
// (admin.CapacityAdmin) from the shard map's size readings, the daily
// size samples in etcd and the same fleet measurement as `convoy plan`.
type capacityAdmin struct {
	cli    *clientv3.Client
	c      Config
	routes func() *router.Snapshot
	sizes  func() (map[router.Shard]planner.ShardSize, time.Time, string)
}

var sizeColumns = []string{"scope", "datasource", "database", "rows", "bytes", "rows_per_day", "bytes_per_day", "measured_at"}

func (a *capacityAdmin) ShardSizes(ctx context.Context) ([]string, [][]string, error) {
	sizes, at, serr := a.sizes()
	if sizes == nil {
		if serr == "" {
			serr = "the first reading of the datasources' statistics has not finished yet"
		}
		return nil, nil, fmt.Errorf("no size reading: %s", serr)
	}
	samples, err := coord.SizeSamples(ctx, a.cli, a.c.Etcd.Cluster)
	if err != nil {
		return nil, nil, err
	}
	var old *coord.SizeSample
	var days float64
	if len(samples) > 0 {
		if d := at.Sub(samples[0].Taken).Hours() / 24; d >= 0.5 {
			old, days = &samples[0], d
		}
	}
	perDay := func(now, then int64) string {
		if old == nil {
			return "" // growth needs a sample at least half a day old
		}
		return strconv.FormatFloat(float64(now-then)/days, 'f', 0, 64)
	}
	snap := a.routes()
	type total struct{ rows, bytes, oldRows, oldBytes int64 }
	byDS := map[string]*total{}
	var rows [][]string
	when := at.UTC().Format(time.RFC3339)
	for sh := range router.Shard(router.NumShards) {
		t := snap.Target(sh)
		sz := sizes[sh]
		var oRows, oBytes int64
		if old != nil {
			oRows, oBytes = old.Shards[sh][0], old.Shards[sh][1]
		}
		rows = append(rows, []string{"shard " + sh.String(), t.Datasource, t.Database, strconv.FormatInt(sz.Rows, 10),
			strconv.FormatInt(sz.Bytes, 10), perDay(sz.Rows, oRows), perDay(sz.Bytes, oBytes), when})
		d := byDS[t.Datasource]
		if d == nil {
			d = &total{}
			byDS[t.Datasource] = d
		}
		d.rows, d.bytes, d.oldRows, d.oldBytes = d.rows+sz.Rows, d.bytes+sz.Bytes, d.oldRows+oRows, d.oldBytes+oBytes
	}
	names := make([]string, 0, len(byDS))
	for n := range byDS {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d := byDS[n]
		rows = append(rows, []string{"datasource " + n, n, "", strconv.FormatInt(d.rows, 10), strconv.FormatInt(d.bytes, 10),
			perDay(d.rows, d.oldRows), perDay(d.bytes, d.oldBytes), when})
	}
	return sizeColumns, rows, nil
}

func (a *capacityAdmin) PlanExpansion(ctx context.Context, minDatasources int) ([]string, [][]string, error) {
	rate := a.c.Migration.Rate
	if rate <= 0 {
		rate = float64(migrate.DefaultRate)
	}
	var notes []string
	in, err := measureFleet(ctx, a.cli, a.c, planner.SeedLimits(), rate, 8, func(s string) { notes = append(notes, s) })
	if err != nil {
		return nil, nil, err
	}
	in.MinDatasources = minDatasources
	var buf bytes.Buffer
	if err := report(&buf, in, ""); err != nil {
		return nil, nil, err
	}
	var rows [][]string
	for _, n := range notes {
		rows = append(rows, []string{"note: " + n})
	}
	for _, l := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n") {
		rows = append(rows, []string{l})
	}
	return []string{"plan"}, rows, nil
}
