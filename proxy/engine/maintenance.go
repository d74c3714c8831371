package engine

import (
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// maintenance runs ANALYZE / OPTIMIZE TABLE on a sharded table: on every
// physical table (DDLParallelism at a time, no statement timeout: OPTIMIZE
// rebuilds), answered as MariaDB answers for one table: its rows (Table,
// Op, Msg_type, Msg_text) under the logical name, each distinct row once
// (every physical table says "status OK"; a note or error of any of them
// is kept, physical names made logical).
func (s *Session) maintenance(pl *plan, binary bool) (*mysql.Result, error) {
	m := pl.a.Maintenance
	snap := s.e.routes.Current()
	verb := strings.ToUpper(m.Op)
	if m.Local {
		verb += " NO_WRITE_TO_BINLOG"
	}
	var out *mysql.Resultset
	for _, tn := range m.Tables {
		logical := tn.Name.L
		db := tn.Schema.O
		if db == "" {
			db = s.db
		}
		groups := snap.AllPhysical(logical)
		parts := make([]part, len(groups))
		for i, g := range groups {
			parts[i] = part{shard: g.Shards[0], ds: g.Datasource, untimed: true,
				sql: verb + " TABLE " + quoteIdent(g.Database) + "." + quoteIdent(g.Table)}
		}
		results := make([]*mysql.Result, len(parts))
		errs := make([]error, len(parts))
		s.parallelN(len(parts), s.e.opt.DDLParallelism, func(i int) {
			results[i], errs[i] = s.autonomous(parts[i], true, false)
		})
		seen := map[string]bool{}
		for i, r := range results {
			if errs[i] != nil {
				return nil, shardError(snap, logical, parts[i].shard, classify(errs[i]))
			}
			rows, err := textRows(r)
			if err != nil || r.Resultset == nil || len(r.Fields) != 4 {
				return nil, errorf(CodeInternal, "[BUG] %s of %s answered without its four columns", verb, snap.Physical(logical, parts[i].shard))
			}
			if out == nil {
				out = &mysql.Resultset{Fields: r.Fields}
			}
			for _, row := range rows {
				text := toLogical(string(row[3]), snap, parts[i].shard, db)
				key := string(row[1]) + "\x00" + string(row[2]) + "\x00" + text
				if seen[key] {
					continue
				}
				seen[key] = true
				out.RowDatas = append(out.RowDatas, textRow([][]byte{[]byte(db + "." + tn.Name.O), row[1], row[2], []byte(text)}))
			}
		}
	}
	if out == nil {
		return nil, errorf(CodeInternal, "[BUG] %s named no table", verb)
	}
	if binary && !textToBinary(out) {
		return nil, errorf(CodeInternal, "[BUG] %s rows could not be encoded for the binary protocol", verb)
	}
	return &mysql.Result{Resultset: out}, nil
}
