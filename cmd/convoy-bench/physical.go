package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/convoy-im/convoy/router"
)

// physical is client-side sharding: the conv_msg reads go straight to the
// physical table of their shard, on the datasource that holds it (the
// layout of `convoy routes init --dbs N`). Through bare relays it measures
// what the sharded layout itself costs MariaDB, without any proxy logic: the
// fair ceiling for Convoy on sharded tables.
type physical struct {
	snap *router.Snapshot
	dbs  map[string]*sql.DB // datasource name -> pool
}

// physicalOps are the operations physical mode can route (conv_msg reads).
var physicalOps = map[string]bool{"first": true, "scroll": true, "catchup": true, "jump": true, "point": true}

// openPhysical parses name=DSN,name=DSN (in datasource order) and builds the
// default layout with dbs databases over them.
func openPhysical(spec string, dbs, conns int, text bool) (*physical, error) {
	var dss []router.Datasource
	p := &physical{dbs: map[string]*sql.DB{}}
	for _, kv := range strings.Split(spec, ",") {
		name, dsn, ok := strings.Cut(kv, "=")
		if !ok || name == "" || dsn == "" {
			return nil, fmt.Errorf("--physical: want name=DSN,..., got %q", kv)
		}
		full, err := buildDSN(dsn, text)
		if err != nil {
			return nil, err
		}
		db, err := sql.Open("mysql", full)
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(conns + 8)
		db.SetMaxIdleConns(conns + 8)
		p.dbs[name] = db
		dss = append(dss, router.Datasource{Name: name, Addr: "127.0.0.1:1"})
	}
	doc, err := router.DefaultLayout(dss, dbs)
	if err != nil {
		return nil, err
	}
	if p.snap, err = router.NewSnapshot(doc); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *physical) close() {
	for _, db := range p.dbs {
		db.Close()
	}
}

// conns opens one connection per datasource for a worker.
func (p *physical) conns(ctx context.Context) (map[string]*sql.Conn, error) {
	out := map[string]*sql.Conn{}
	for name, db := range p.dbs {
		c, err := db.Conn(ctx)
		if err != nil {
			for _, c := range out {
				c.Close()
			}
			return nil, err
		}
		out[name] = c
	}
	return out, nil
}

// route rewrites a conv_msg read for the physical table of conv.
func (p *physical) route(q string, conv uint64) (string, string) {
	t := p.snap.Physical("conv_msg", router.ShardOf(conv))
	return strings.Replace(q, "FROM conv_msg", "FROM `"+t.Database+"`.`"+t.Table+"`", 1), t.Datasource
}
