package engine

import (
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/proxy/mysqlrow"
	"github.com/convoy-im/convoy/proxy/sqlerr"
)

// maintenance runs ANALYZE / OPTIMIZE / CHECK / REPAIR / CHECKSUM TABLE on
// a sharded table: on every physical table (DDLParallelism at a time, no
// statement timeout: OPTIMIZE rebuilds), answered as MariaDB answers for
// one table: its rows (Table, Op, Msg_type, Msg_text) under the logical
// name, each distinct row once (every physical table says "status OK"; a
// note or error of any of them is kept, physical names made logical).
// CHECKSUM's (Table, Checksum) is the sum of the physical tables' modulo
// 2^32, which is the logical table's: MariaDB adds up its rows' checksums
// (NULL if any is NULL: QUICK on a table without a live checksum).
func (s *Session) maintenance(pl *plan, binary bool) (*mysql.Result, error) {
	m := pl.A.Maintenance
	snap := s.e.routes.Current()
	verb := strings.ToUpper(m.Op)
	if m.Local {
		verb += " NO_WRITE_TO_BINLOG"
	}
	options := ""
	if m.Options != "" {
		options = " " + m.Options
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
				sql: verb + " TABLE " + sqlq.Ident(g.Database) + "." + sqlq.Ident(g.Table) + options}
		}
		results := make([]*mysql.Result, len(parts))
		errs := make([]error, len(parts))
		s.parallelN(len(parts), s.e.opt.DDLParallelism, func(i int) {
			results[i], errs[i] = s.autonomous(parts[i], true, false)
		})
		for i := range results {
			if errs[i] != nil {
				return nil, shardError(snap, logical, parts[i].shard, classify(errs[i]))
			}
		}
		name := []byte(db + "." + tn.Name.O)
		if m.Op == "checksum" {
			row, fields, err := sumChecksums(results)
			if err != nil {
				return nil, err
			}
			if out == nil {
				out = &mysql.Resultset{Fields: fields}
			}
			out.RowDatas = append(out.RowDatas, mysqlrow.TextRow([][]byte{name, row}))
			continue
		}
		seen := map[string]bool{}
		for i, r := range results {
			rows, err := mysqlrow.TextRows(r)
			if err != nil || r.Resultset == nil || len(r.Fields) != 4 {
				return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] %s of %s answered without its four columns", verb, snap.Physical(logical, parts[i].shard))
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
				out.RowDatas = append(out.RowDatas, mysqlrow.TextRow([][]byte{name, row[1], row[2], []byte(text)}))
			}
		}
	}
	if out == nil {
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] %s named no table", verb)
	}
	if binary && !mysqlrow.TextToBinary(out) {
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] %s rows could not be encoded for the binary protocol", verb)
	}
	return &mysql.Result{Resultset: out}, nil
}

// sumChecksums adds the physical tables' CHECKSUM TABLE values modulo 2^32
// (nil: NULL, if any of them is).
func sumChecksums(results []*mysql.Result) ([]byte, []*mysql.Field, error) {
	var sum uint64
	for _, r := range results {
		rows, err := mysqlrow.TextRows(r)
		if err != nil || r.Resultset == nil || len(r.Fields) != 2 || len(rows) != 1 {
			return nil, nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] CHECKSUM TABLE answered without its one row of two columns")
		}
		v := rows[0][1]
		if v == nil {
			return nil, results[0].Fields, nil
		}
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return nil, nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] CHECKSUM TABLE answered %q", v)
		}
		sum = (sum + n) & 0xffffffff
	}
	return []byte(strconv.FormatUint(sum, 10)), results[0].Fields, nil
}
