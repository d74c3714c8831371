package engine

import (
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/planbuilder"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// RunTargeted runs sql, the statement a DBA put after a targeting
// directive, where the directive sends it: on shard (>= 0, /*+ convoy
// shard=N */), raw on datasource (non-empty, /*+ convoy datasource=NAME
// */), else on every shard (/*+ convoy all */). The admin privilege is the
// caller's to check (package proxy/admin, which calls it while answering
// the directive inside Answer).
func (s *Session) RunTargeted(shard int, datasource, sql string) (*mysql.Result, error) {
	snap := s.e.routes.Current()
	if datasource != "" {
		if _, ok := snap.Datasource(datasource); !ok {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "unknown datasource %q", datasource)
		}
		if s.inTxn() {
			return nil, sqlerr.Errorf(sqlerr.CrossShardTxn, "datasource=%s cannot run inside a transaction", datasource)
		}
		// Raw: the DBA addresses physical objects by their own names, and
		// may run maintenance longer than the statement timeout.
		c, err := s.acquire(datasource)
		if err != nil {
			return nil, err
		}
		defer c.Release()
		setTimeout(c, 0)
		r, err := c.Exec(sql)
		if strings.Contains(strings.ToLower(sql), planbuilder.HistoryTable) {
			s.e.invalidateAllHistory() // a raw write the proxy cannot attribute
		}
		return r, err
	}
	// shard=N names the shard: the statement may join tables of both
	// shard keys, whose shares of shard N live in the same database.
	s.onShard = shard >= 0
	pl, err := s.plan(sql)
	s.onShard = false
	if err != nil {
		return nil, err
	}
	if pl.A.ParamCount > 0 {
		return nil, sqlerr.Errorf(sqlerr.Syntax, "You have an error in your SQL syntax: '?' placeholders are only valid in prepared statements")
	}
	if pl.Tmpl == nil {
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "/*+ convoy %s */ needs a statement on a sharded table", targetWords(shard))
	}
	if pl.TouchesHistory() || (pl.A.Kind == rewrite.KindDDL && pl.A.Sharded[0] == planbuilder.HistoryTable) {
		defer s.e.invalidateAllHistory()
	}
	// A targeted write waits behind migration holds like any write (see
	// hold.go), then is routed under the routes served after the wait:
	// shard=N on shard N (on a layout whose physical tables several shards
	// share, it touches its co-tenants' rows unheld), all on every shard.
	// datasource= is raw SQL on physical objects Convoy does not parse:
	// it is never held.
	if held := s.targetedShards(shard, pl); held != nil {
		shards, err := s.admitShards(held)
		if err != nil {
			return nil, err
		}
		defer s.endWrite(shards)
		snap = s.e.routes.Current()
	}
	if shard >= 0 {
		sh := router.Shard(shard)
		p := part{shard: sh, ds: snap.Target(sh).Datasource, sql: pl.render(s, snap, sh), untimed: pl.A.Kind == rewrite.KindDDL}
		if pl.A.Kind == rewrite.KindDDL {
			_, err := s.autonomous(p, true, false)
			if err != nil {
				return nil, err
			}
			return okResult(), nil
		}
		return s.single(p, pl.Write(), false)
	}
	// all: a keyless UPDATE / DELETE may touch every shard.
	switch pl.A.Kind {
	case rewrite.KindUpdate, rewrite.KindDelete:
		if pl.A.HasKey {
			return s.run(pl, nil, false)
		}
		if s.inTxn() {
			return nil, sqlerr.Errorf(sqlerr.CrossShardTxn, "/*+ convoy all */ cannot run inside a transaction")
		}
		if limited(pl.A.Stmt) {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "%s with ORDER BY / LIMIT cannot run on every shard", pl.A.Kind)
		}
		var parts []part
		for _, g := range snap.AllPhysical(pl.A.Sharded[0]) {
			parts = append(parts, part{shard: g.Shards[0], ds: g.Datasource, sql: pl.render(s, snap, g.Shards[0])})
		}
		return s.writeParts(parts, false)
	}
	return s.run(pl, nil, false)
}

// targetedShards are the shards a shard= or all statement's write must be
// admitted on; nil for a read, or for what RunTargeted hands to run (which
// admits it itself).
func (s *Session) targetedShards(shard int, pl *plan) []router.Shard {
	switch {
	case !pl.Write():
		return nil
	case shard >= 0:
		s.oneShard[0] = router.Shard(shard)
		return s.oneShard[:]
	case !pl.A.HasKey && (pl.A.Kind == rewrite.KindUpdate || pl.A.Kind == rewrite.KindDelete):
		return allShards
	}
	return nil
}

// targetWords names the directive of a shard= or all statement in its
// errors.
func targetWords(shard int) string {
	if shard >= 0 {
		return "shard=" + strconv.Itoa(shard)
	}
	return "all"
}
