package engine

import (
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/mysqlrow"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/router"
)

// EXPLAIN of a statement on sharded tables: the DBA's question is "which
// plan does this query get on the shard it reaches", so the statement is
// routed as it would run and the backend of each physical table it reaches
// explains it there (the table column names the physical table). A
// statement without a shard-key condition reaches every shard: one
// representative physical table explains it, and a note says so. Nothing
// of the statement runs: no hold, no mirror, no hot or cold tier.

// ExplainNoteCode is the note an EXPLAIN carries when the statement
// reaches every shard and one physical table's plan stands for all:
// ER_UNKNOWN_ERROR's number, as MariaDB notes of its own kind have no
// code of their own.
const ExplainNoteCode = 1105

// runExplain explains pl's statement on the physical tables it reaches
// (one representative table for a statement that reaches every shard),
// their answers one after the other.
func (s *Session) runExplain(pl *plan, args []any, binary bool) (*mysql.Result, error) {
	s.e.metrics.countStatement("sharded")
	snap := s.e.routes.Current()
	var shards []router.Shard
	if pl.A.HasKey {
		var err error
		if shards, err = s.shardsOf(pl.A.Keys, args); err != nil {
			return nil, err
		}
	} else {
		sh := repShard(snap)
		shards = []router.Shard{sh}
		t := snap.Target(sh)
		p := snap.Physical(pl.A.Sharded[0], sh)
		s.warn(Warning{Level: "Note", Code: ExplainNoteCode, Message: fmt.Sprintf(
			"the statement has no %s condition and reaches every shard of %s: the plan shown is shard %d's, on %s.%s of datasource %s",
			pl.A.KeyColumn, pl.A.Sharded[0], sh, p.Database, p.Table, t.Datasource)})
	}
	var out *mysql.Result
	seen := map[router.Target]bool{}
	var notes []Warning // which rows are which physical table's, for several
	for _, sh := range shards {
		t := snap.Target(sh)
		if seen[t] {
			continue
		}
		seen[t] = true
		r, err := s.explainOn(pl, snap, sh, t.Datasource, args)
		if err != nil {
			return nil, err
		}
		from := 0
		switch {
		case out == nil:
			out = r
		case r.Resultset != nil && out.Resultset != nil:
			from = len(out.RowDatas)
			out.RowDatas = append(out.RowDatas, r.RowDatas...)
		}
		if r.Resultset != nil {
			ph := snap.Physical(pl.A.Sharded[0], sh)
			notes = append(notes, Warning{Level: "Note", Code: ExplainNoteCode, Message: fmt.Sprintf(
				"plan rows %d-%d: shard %d, %s.%s of datasource %s", from+1, from+len(r.RowDatas), sh, ph.Database, ph.Table, t.Datasource)})
		}
	}
	if binary && out != nil && out.Resultset != nil && !mysqlrow.TextToBinary(out.Resultset) {
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] an EXPLAIN answer has no binary form")
	}
	if len(notes) > 1 {
		for _, n := range notes {
			s.warn(n)
		}
	}
	return out, nil
}

// explainOn explains pl's statement on shard sh's physical tables, as
// text with any arguments printed in (so the answer's names can be put
// back: never the inline path of partFor, which may run the plain
// statement again), its physical database and table names renamed to the
// logical ones, as a client of one MariaDB would see them.
func (s *Session) explainOn(pl *plan, snap *router.Snapshot, sh router.Shard, ds string, args []any) (*mysql.Result, error) {
	phys := func(l string) (string, string) {
		p := snap.Physical(l, sh)
		return p.Database, p.Table
	}
	var sql string
	if len(args) > 0 {
		b, ok := pl.Tmpl.RenderInline(s.buf[:0], phys, args)
		if !ok {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "this placeholder value is not supported in an EXPLAIN on the sharded table %s", pl.A.Sharded[0])
		}
		s.buf, sql = b, pl.Explain+string(b)
	} else {
		sql = pl.Explain + pl.render(s, snap, sh)
	}
	r, err := s.single(part{shard: sh, ds: ds, sql: sql}, false, false)
	if err != nil || r.Resultset == nil {
		return r, err
	}
	rows, err := mysqlrow.TextRows(r)
	if err != nil {
		return nil, err
	}
	for i, row := range rows {
		for j, v := range row {
			if v != nil {
				row[j] = []byte(toLogical(string(v), snap, sh, s.db))
			}
		}
		r.RowDatas[i] = mysqlrow.TextRow(row)
	}
	r.Values = nil
	return r, nil
}

// toLogical puts the logical names back in a server's text about
// shard sh's physical tables (an EXPLAIN row, a warning): db.table.column
// of the current database's table becomes table.column and any other
// physical database (plain or quoted) the client's current one, as MariaDB names them in
// the logical schema (without a current database the physical one
// stays); then the physical table names become the logical ones.
func toLogical(text string, snap *router.Snapshot, sh router.Shard, db string) string {
	if text == "" {
		return text
	}
	var pairs []string
	for pass := 0; pass < 3; pass++ {
		for _, l := range router.ShardedTables() {
			p := snap.Physical(l, sh)
			switch {
			case pass == 0 && db != "":
				pairs = append(pairs, p.Database+"."+p.Table+".", l+".")
			case pass == 1 && db != "":
				// A warning names a column `db`.`table`.`column`.
				pairs = append(pairs, p.Database+".", db+".", "`"+p.Database+"`.", "`"+db+"`.")
			case pass == 2:
				pairs = append(pairs, p.Table, l)
			}
		}
	}
	for i := 0; i < len(pairs); i += 2 {
		text = strings.ReplaceAll(text, pairs[i], pairs[i+1])
	}
	return text
}
