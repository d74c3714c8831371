package engine

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/proxy/loadfile"
	"github.com/convoy-im/convoy/proxy/mysqlrow"
	"github.com/convoy-im/convoy/proxy/planbuilder"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// LOAD DATA LOCAL INFILE (rewrite.KindLoadData). No datasource is asked to
// read a client's file: Convoy asks the client for it (LocalFiles, the
// protocol's 0xFB request), cuts it into rows as MariaDB would (package
// loadfile) and writes them with INSERT statements it builds, one per
// physical table and batch, each run as the client's own prepared INSERT would run
// (privileges, routing, migration holds, the hot tier, seq allocation).
//
// What the client sees is MariaDB's: LOCAL without REPLACE ignores
// duplicates and bad values (warnings), the OK says "Records: n  Deleted:
// d  Skipped: s  Warnings: w", and SHOW WARNINGS lists the conditions in
// file order with the file's row numbers (1261 for a short line, 1262 for
// a long one, 1263 for \N in a NOT NULL column, the datasources' own with
// their row renumbered). Unlike one MariaDB statement, a load is not
// atomic across batches: each batch commits on its own outside a
// transaction, like one multi-row INSERT per shard; inside one, the whole
// load goes to the transaction's shard (a row of another fails it with
// 1235 and undoes the load's rows, not the transaction's).

// LocalFiles opens the client's file for LOAD DATA LOCAL INFILE: it asks
// the client for name and returns what the client sends. Close reads
// whatever is left, as the protocol needs before the reply.
type LocalFiles func(name string) (io.ReadCloser, error)

// SetLocalFiles gives the session its client's files (nil: it has none).
func (s *Session) SetLocalFiles(f LocalFiles) { s.localFiles = f }

// Local-infile policies (Options.LocalInfile).
const (
	LocalInfileSharded = "sharded" // the default: sharded tables only
	LocalInfileAll     = "all"     // unsharded tables too (rows through INSERTs on the default datasource)
	LocalInfileOff     = "off"
)

// LocalInfileEnabled reports whether clients may send files at all (the
// greeting's CLIENT_LOCAL_FILES).
func (e *Engine) LocalInfileEnabled() bool { return e.opt.LocalInfile != LocalInfileOff }

// Batch bounds of a load: rows and argument bytes per INSERT, and what all
// the shards' pending rows may hold before every batch is sent.
const (
	loadBatchRows  = 1000
	loadBatchBytes = 1 << 20
	loadBuffered   = 32 << 20
	loadMaxParams  = 65535 // placeholders of one prepared statement
	loadSavepoint  = "convoy_load_data"
)

func errNotAllowed(why string) error {
	return &mysql.MyError{Code: mysql.ER_NOT_ALLOWED_COMMAND, State: "42000",
		Message: "The used command is not allowed with this MariaDB version (" + why + ")"}
}

// loadData runs a LOAD DATA LOCAL INFILE.
func (s *Session) loadData(pl *plan) (*mysql.Result, error) {
	l := pl.A.Load
	sharded := len(pl.A.Sharded) > 0
	switch {
	case s.e.opt.LocalInfile == LocalInfileOff:
		return nil, errNotAllowed("LOAD DATA LOCAL is off in Convoy: local_infile")
	case !sharded && s.e.opt.LocalInfile != LocalInfileAll:
		return nil, errNotAllowed("LOAD DATA LOCAL into unsharded tables is off in Convoy: local_infile: all allows it")
	case s.localFiles == nil:
		return nil, errNotAllowed("this session has no client to send a file")
	}
	if sharded {
		s.e.metrics.countStatement("sharded")
	} else {
		s.e.metrics.countStatement("unsharded")
	}
	ld, err := s.newLoad(l, pl.A.Sharded)
	if err != nil {
		return nil, err
	}
	f, err := s.localFiles(l.File)
	if err != nil {
		return nil, err
	}
	r, err := ld.run(f)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return r, err
}

// load is one LOAD DATA LOCAL INFILE under way.
type load struct {
	s       *Session
	l       *rewrite.LoadData
	format  loadfile.Format
	targets []rewrite.LoadTarget
	// fields is the number of fields a row reads; colOf[i] the INSERT
	// column of field i, -1 for a variable.
	fields int
	colOf  []int
	cols   []string      // the INSERT's columns: the fields' columns, then SET's
	info   []*loadColumn // of the fields' columns
	head   string        // INSERT IGNORE INTO t (cols) VALUES / REPLACE INTO ...
	row    string        // (?, ?, expr) of one row
	params int           // placeholders per row
	key    int           // the field with the shard key; -1: unsharded
	// seqField is the field with conv_msg's seq, -1 for none: a load of
	// messages with their seqs moves each conversation's im_conv_seq past
	// them, so that the seqs Convoy gives later messages follow them.
	seqField int
	seqPlans map[int]*plan
	ignore   bool
	plans    map[int]*plan // by rows per batch

	// batches are the rows waiting, per physical table: the rows of
	// several shards of a shared table go in one INSERT, as a client's
	// multi-row INSERT does (the engine routes each INSERT by its rows
	// again, so a route that changes meanwhile only costs a split).
	batches  map[router.Target]*loadBatch
	buffered int
	rows     uint64 // rows read
	// Counted over the batches sent: rows written (INSERT) or replaced
	// (REPLACE), rows deleted by REPLACE, the warnings, and the first
	// AUTO_INCREMENT value generated.
	copied, deleted uint64
	conds           []loadCond
	condCount       int
	seq             int
	insertID        uint64
	strictMode      *bool
	savepoint       bool
}

// loadBatch is the rows of one physical table waiting for their INSERT.
type loadBatch struct {
	first router.Shard // the shard of its first row (flushAll sends in this order)
	args  []any
	rows  []uint64   // the file's row number of each row
	own   []loadCond // Convoy's own conditions of these rows
	// maxSeq is the largest seq of each conversation in these rows (a
	// conv_msg load with seqs).
	maxSeq map[uint64]uint64
	bytes  int
}

// loadCond is a condition of the load, placed in file order: by row, then
// before the datasource's conditions of the row (1261, 1263) or after
// them (1262), then in the order they came.
type loadCond struct {
	row   uint64
	order int // 0 before, 1 the datasource's, 2 after
	seq   int
	w     Warning
}

// newLoad checks the statement before the file is asked for, as MariaDB
// does: the table and its columns, the shard key's source, the format.
func (s *Session) newLoad(l *rewrite.LoadData, sharded []string) (*load, error) {
	ld := &load{s: s, l: l, key: -1, seqField: -1, seqPlans: map[int]*plan{}, ignore: !l.Replace, plans: map[int]*plan{}, batches: map[router.Target]*loadBatch{}}
	f, err := s.loadFormat(l)
	if err != nil {
		return nil, err
	}
	ld.format = f
	columns, err := s.loadColumns(l.Table, sharded)
	if err != nil {
		return nil, err
	}
	column := func(name string) (*loadColumn, error) {
		i := slices.IndexFunc(columns, func(c loadColumn) bool { return strings.EqualFold(c.name, name) })
		if i < 0 {
			return nil, &mysql.MyError{Code: mysql.ER_BAD_FIELD_ERROR, State: "42S22", Message: fmt.Sprintf("Unknown column '%s' in 'field list'", name)}
		}
		return &columns[i], nil
	}
	ld.targets = l.Targets
	if ld.targets == nil {
		for _, c := range columns {
			ld.targets = append(ld.targets, rewrite.LoadTarget{Column: c.name})
		}
	}
	var keyCol string
	if len(sharded) > 0 {
		keyCol, _ = router.ShardKeyColumn(sharded[0])
	}
	// A field is sent as a parameter, which the datasource reads in the
	// connection's character set: when that is not the file's, the bytes
	// are given the file's (the shard key is digits, and stays a bare
	// parameter, which routing needs).
	fileValue := "?"
	if !s.utf8Client() {
		fileValue = "CONVERT(CAST(? AS BINARY) USING utf8mb4)"
		switch l.Charset {
		case "utf8", "utf8mb3":
			fileValue = "CONVERT(CAST(? AS BINARY) USING utf8mb3)"
		case "binary":
			fileValue = "CAST(? AS BINARY)"
		}
	}
	seen := map[string]bool{}
	use := func(name string) (*loadColumn, error) {
		c, err := column(name)
		if err != nil {
			return nil, err
		}
		if seen[strings.ToLower(c.name)] {
			return nil, &mysql.MyError{Code: mysql.ER_FIELD_SPECIFIED_TWICE, State: "42000", Message: fmt.Sprintf("Column '%s' specified twice", c.name)}
		}
		seen[strings.ToLower(c.name)] = true
		return c, nil
	}
	var row []string
	ld.fields = len(ld.targets)
	for _, t := range ld.targets {
		if t.Var != "" {
			ld.colOf = append(ld.colOf, -1)
			continue
		}
		c, err := use(t.Column)
		if err != nil {
			return nil, err
		}
		ld.colOf = append(ld.colOf, len(ld.cols))
		ld.cols = append(ld.cols, c.name)
		ld.info = append(ld.info, c)
		ph := "?"
		if !strings.EqualFold(c.name, keyCol) {
			ph = fileValue
		}
		if c.nowIfNull {
			ph = "COALESCE(" + ph + ", CURRENT_TIMESTAMP(6))"
		}
		row = append(row, ph)
	}
	ld.params = len(row)
	for _, set := range l.Sets {
		c, err := use(set.Column)
		if err != nil {
			return nil, err
		}
		ld.cols = append(ld.cols, c.name)
		switch {
		case fileValue == "?" || len(set.Vars) == 0:
			row = append(row, set.Expr)
		case set.Expr == "?":
			row = append(row, fileValue) // SET col = @v
		default:
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "LOAD DATA LOCAL with SET %s = an expression over the file's variables needs a utf8mb4 connection through Convoy (SET NAMES utf8mb4): the values would be read in the connection's character set, not the file's", c.name)
		}
		ld.params += len(set.Vars)
	}
	if len(ld.cols) == 0 {
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "this LOAD DATA writes no column: name one in its column list or SET")
	}
	if len(sharded) > 0 {
		ld.key = ld.keyField(keyCol)
		if ld.key < 0 {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "LOAD DATA into the sharded table %s needs its shard key %s from the file: name %s in the column list, or SET %s = @variable of the column list", sharded[0], keyCol, keyCol, keyCol)
		}
		if sharded[0] == planbuilder.HistoryTable {
			ld.seqField = slices.IndexFunc(ld.targets, func(t rewrite.LoadTarget) bool { return t.Var == "" && strings.EqualFold(t.Column, "seq") })
		}
	}
	table, err := rewrite.Restore(l.Table)
	if err != nil {
		return nil, classify(err)
	}
	verb := "INSERT IGNORE INTO "
	if l.Replace {
		verb = "REPLACE INTO "
	}
	quoted := make([]string, len(ld.cols))
	for i, c := range ld.cols {
		quoted[i] = sqlq.Ident(c)
	}
	ld.head = verb + table + " (" + strings.Join(quoted, ", ") + ") VALUES "
	ld.row = "(" + strings.Join(row, ", ") + ")"
	return ld, nil
}

// keyField is the field that gives column col its value (the column
// itself, or a variable SET to it bare), -1 for none.
func (ld *load) keyField(col string) int {
	for i, t := range ld.targets {
		if t.Var == "" && strings.EqualFold(t.Column, col) {
			return i
		}
	}
	for _, set := range ld.l.Sets {
		if strings.EqualFold(set.Column, col) && set.Expr == "?" {
			return set.Vars[0]
		}
	}
	return -1
}

// loadFormat reads the FIELDS and LINES clauses. The escape is a
// backslash unless given, and none under NO_BACKSLASH_ESCAPES (MariaDB).
func (s *Session) loadFormat(l *rewrite.LoadData) (loadfile.Format, error) {
	f := loadfile.DefaultFormat()
	if s.NoBackslashEscapes() {
		f.Escape = -1
	}
	char := func(p *string, what string) (int, error) {
		switch {
		case len(*p) == 0:
			return -1, nil
		case len(*p) > 1:
			return 0, &mysql.MyError{Code: mysql.ER_WRONG_FIELD_TERMINATORS, State: "42000", Message: "Field separator argument is not what is expected; check the manual"}
		}
		return int((*p)[0]), nil
	}
	var err error
	if l.FieldsTerm != nil {
		f.FieldTerm = *l.FieldsTerm
	}
	if l.Enclosed != nil {
		if f.Enclosed, err = char(l.Enclosed, "ENCLOSED BY"); err != nil {
			return f, err
		}
	}
	if l.Escaped != nil {
		if f.Escape, err = char(l.Escaped, "ESCAPED BY"); err != nil {
			return f, err
		}
	}
	if l.LinesStart != nil {
		f.LineStart = *l.LinesStart
	}
	if l.LinesTerm != nil {
		f.LineTerm = *l.LinesTerm
	}
	if f.FieldTerm == "" && f.Enclosed < 0 {
		return f, sqlerr.Errorf(sqlerr.NotSupported, "LOAD DATA LOCAL of fixed-size rows (FIELDS TERMINATED BY '' ENCLOSED BY '') is not supported through Convoy: give the file a field terminator")
	}
	switch l.Charset {
	case "", "utf8mb4", "utf8mb3", "utf8", "binary":
		// Bytes that never hide an ASCII terminator inside a character,
		// sent as they are: the datasource converts them to each column's
		// character set, as it would the file's.
	default:
		return f, sqlerr.Errorf(sqlerr.NotSupported, "LOAD DATA LOCAL ... CHARACTER SET %s is not supported through Convoy: send the file in utf8mb4 (or binary)", l.Charset)
	}
	return f, nil
}

// loadColumn is what a load needs to know of a column: what MariaDB
// stores for a field a line lacks and for \N (LOAD DATA resets the field
// to its type's zero unless the column's default is NULL).
type loadColumn struct {
	name string
	// nullDefault: the default is NULL, so a missing field stays NULL.
	nullDefault bool
	notNull     bool
	// zero is the type's zero value ('', 0, a zero date); nil where the
	// server fills the column itself (AUTO_INCREMENT, a NOT NULL
	// TIMESTAMP) or Convoy cannot print it.
	zero []byte
	// nowIfNull: a NOT NULL TIMESTAMP, which takes the current time for
	// a missing field or \N.
	nowIfNull bool
}

// loadColumns reads the columns of the table a load writes, in order:
// from one of its physical tables (after checking that all of them have
// the same columns), or the unsharded table on the default datasource.
func (s *Session) loadColumns(t *ast.TableName, sharded []string) ([]loadColumn, error) {
	snap := s.e.routes.Current()
	var ds, db, table string
	if len(sharded) > 0 {
		if _, err := s.e.logicalColumns(sharded[0]); err != nil {
			return nil, err
		}
		p := snap.Physical(sharded[0], 0)
		ds, db, table = p.Datasource, p.Database, p.Table
	} else {
		ds, db, table = snap.DefaultDatasource(), t.Schema.O, t.Name.O
		if db == "" {
			db = s.db
		}
		if db == "" {
			return nil, &mysql.MyError{Code: mysql.ER_NO_DB_ERROR, State: "3D000", Message: "No database selected"}
		}
	}
	_, rows, err := s.e.queryRows(ds, "SELECT COLUMN_NAME, IS_NULLABLE, COLUMN_DEFAULT IS NULL OR COLUMN_DEFAULT = 'NULL', DATA_TYPE, EXTRA FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "+
		rewrite.QuoteString(db)+" AND TABLE_NAME = "+rewrite.QuoteString(table)+" ORDER BY ORDINAL_POSITION")
	if err != nil {
		return nil, classify(err)
	}
	if len(rows) == 0 {
		if len(sharded) > 0 {
			db, table = s.db, sharded[0]
		}
		return nil, &mysql.MyError{Code: mysql.ER_NO_SUCH_TABLE, State: "42S02", Message: fmt.Sprintf("Table '%s.%s' doesn't exist", db, table)}
	}
	cols := make([]loadColumn, 0, len(rows))
	for _, r := range rows {
		if len(r) < 5 {
			return nil, sqlerr.Errorf(sqlerr.Internal, "datasource %s answered the column query with %d columns, want 5", ds, len(r))
		}
		c := loadColumn{name: string(r[0]), notNull: string(r[1]) == "NO"}
		c.nullDefault = !c.notNull && string(r[2]) == "1"
		typ := strings.ToLower(string(r[3]))
		switch {
		case strings.Contains(strings.ToLower(string(r[4])), "auto_increment"):
		case typ == "timestamp":
			c.nowIfNull = c.notNull
		case strings.HasSuffix(typ, "int") || typ == "decimal" || typ == "float" || typ == "double" || typ == "bit" || typ == "year":
			c.zero = []byte("0")
		case typ == "date":
			c.zero = []byte("0000-00-00")
		case typ == "datetime":
			c.zero = []byte("0000-00-00 00:00:00")
		case typ == "time":
			c.zero = []byte("00:00:00")
		case strings.HasSuffix(typ, "char") || strings.HasSuffix(typ, "text") || strings.HasSuffix(typ, "binary") || strings.HasSuffix(typ, "blob") || typ == "enum" || typ == "set":
			c.zero = []byte{}
		}
		cols = append(cols, c)
	}
	return cols, nil
}

// run reads the file and writes its rows.
func (ld *load) run(file io.Reader) (*mysql.Result, error) {
	s := ld.s
	if s.inTxn() {
		// The load's rows must go whole or not at all, not the
		// transaction's rows before it.
		if err := ld.statement("SAVEPOINT " + loadSavepoint); err != nil {
			return nil, err
		}
		ld.savepoint = true
	}
	err := ld.read(file)
	if err == nil {
		err = ld.flushAll()
	}
	if ld.savepoint {
		undo := "RELEASE SAVEPOINT " + loadSavepoint
		if err != nil {
			undo = "ROLLBACK TO SAVEPOINT " + loadSavepoint
		}
		if uerr := ld.statement(undo); err == nil {
			err = uerr
		}
	}
	ld.report()
	if err != nil {
		if ld.rows > 0 && !ld.savepoint && ld.copied+ld.deleted > 0 {
			return nil, loadFailed(err, ld.copied+ld.deleted)
		}
		return nil, err
	}
	if ld.insertID != 0 {
		s.lastID = ld.insertID
	}
	r := okResult()
	r.AffectedRows = ld.copied + ld.deleted
	skipped := ld.rows - ld.copied
	if !ld.ignore {
		skipped = 0
	}
	r.StatusMessage = fmt.Sprintf("Records: %d  Deleted: %d  Skipped: %d  Warnings: %d", ld.rows, ld.deleted, skipped, ld.condCount)
	return r, nil
}

// loadFailed names what a failed load left committed: the batches sent
// before the one that failed (outside a transaction each commits).
func loadFailed(err error, written uint64) error {
	note := fmt.Sprintf(" (LOAD DATA through Convoy: %d rows were written and committed before this error)", written)
	var me *mysql.MyError
	var ee *sqlerr.Error
	switch {
	case errors.As(err, &me):
		c := *me
		c.Message += note
		return &c
	case errors.As(err, &ee):
		c := *ee
		c.Msg += note
		return &c
	}
	return err
}

// statement runs one of the load's own statements (its savepoint) as the
// session's.
func (ld *load) statement(sql string) error {
	pl, err := ld.s.plan(sql)
	if err != nil {
		return err
	}
	_, err = ld.s.run(pl, nil, false)
	return classify(err)
}

// read cuts the file into rows and sends them in batches.
func (ld *load) read(file io.Reader) error {
	s := ld.s
	r := loadfile.NewReader(file, ld.format)
	r.SkipLines(ld.l.IgnoreLines)
	vals := make([]loadfile.Field, ld.fields)
	for r.Next(ld.fields) {
		select {
		case <-s.interrupt:
			return sqlerr.Errorf(sqlerr.QueryInterrupted, "Query execution was interrupted")
		default:
		}
		ld.rows++
		n := ld.rows
		got := r.Row()
		copy(vals, got)
		var own []loadCond
		for i := range vals {
			c := ld.colOf[i]
			if c < 0 {
				if i >= len(got) {
					vals[i] = loadfile.Field{Null: true} // a variable: NULL
				}
				continue
			}
			// As MariaDB stores them: a missing field is its column's
			// zero (NULL where that is the default) with 1261; \N in a
			// NOT NULL column is the zero with 1263.
			col := ld.info[c]
			switch {
			case i >= len(got):
				vals[i] = loadfile.Field{Null: col.nullDefault || col.zero == nil, Value: col.zero}
				own = append(own, ld.cond(n, 0, Warning{Level: "Warning", Code: mysql.ER_WARN_TOO_FEW_RECORDS, Message: fmt.Sprintf("Row %d doesn't contain data for all columns", n)}))
			case vals[i].Null && col.notNull && col.zero != nil:
				vals[i] = loadfile.Field{Value: col.zero}
				own = append(own, ld.cond(n, 0, Warning{Level: "Warning", Code: mysql.ER_WARN_NULL_TO_NOTNULL, Message: fmt.Sprintf("Column set to default value; NULL supplied to NOT NULL column '%s' at row %d", col.name, n)}))
			}
		}
		if r.Cut() {
			own = append(own, ld.cond(n, 2, Warning{Level: "Warning", Code: mysql.ER_WARN_TOO_MANY_RECORDS, Message: fmt.Sprintf("Row %d was truncated; it contained more data than there were input columns", n)}))
		}
		if len(own) > 0 && !ld.ignore && ld.strict() {
			// REPLACE in a strict sql_mode: MariaDB's warning is its error.
			state := "01000"
			if own[0].w.Code == mysql.ER_WARN_NULL_TO_NOTNULL {
				state = "22004"
			}
			return &mysql.MyError{Code: own[0].w.Code, State: state, Message: own[0].w.Message}
		}
		sh := router.Shard(0)
		var key uint64
		if ld.key >= 0 {
			k := vals[ld.key]
			if k.Null {
				return &sqlerr.Error{Code: sqlerr.BadShardKey, Msg: fmt.Sprintf("row %d of the file: the shard key is NULL or missing", n)}
			}
			var err error
			if key, err = router.KeyFromValue(k.Value); err != nil {
				return &sqlerr.Error{Code: sqlerr.BadShardKey, Msg: fmt.Sprintf("row %d of the file: %v", n, err)}
			}
			sh = router.ShardOf(key)
		}
		at := s.e.routes.Current().Target(sh)
		b := ld.batches[at]
		if b == nil {
			b = &loadBatch{}
			ld.batches[at] = b
		}
		if len(b.rows) == 0 {
			b.first = sh
		}
		ld.add(b, n, vals, own)
		if ld.seqField >= 0 && !vals[ld.seqField].Null {
			if seq, err := strconv.ParseUint(string(vals[ld.seqField].Value), 10, 64); err == nil {
				if b.maxSeq == nil {
					b.maxSeq = map[uint64]uint64{}
				}
				b.maxSeq[key] = max(b.maxSeq[key], seq)
			}
		}
		if len(b.rows) >= ld.batchRows() || b.bytes >= loadBatchBytes {
			if err := ld.flush(b); err != nil {
				return err
			}
		} else if ld.buffered >= loadBuffered {
			if err := ld.flushAll(); err != nil {
				return err
			}
		}
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("reading the client's file: %w", err)
	}
	return nil
}

// add appends row n, its fields vals.
func (ld *load) add(b *loadBatch, n uint64, vals []loadfile.Field, own []loadCond) {
	b.rows = append(b.rows, n)
	b.own = append(b.own, own...)
	size := 0
	arg := func(f loadfile.Field) any {
		if f.Null {
			return nil
		}
		size += len(f.Value)
		return slices.Clone(f.Value)
	}
	for i, f := range vals {
		if ld.colOf[i] >= 0 {
			b.args = append(b.args, arg(f))
		}
	}
	for _, set := range ld.l.Sets {
		for _, v := range set.Vars {
			b.args = append(b.args, arg(vals[v]))
		}
	}
	size += 8 * ld.params
	b.bytes += size
	ld.buffered += size
}

func (ld *load) batchRows() int {
	return max(1, min(loadBatchRows, loadMaxParams/max(ld.params, 1)))
}

// flushAll sends every waiting batch, in the order of their first rows'
// shards.
func (ld *load) flushAll() error {
	waiting := make([]*loadBatch, 0, len(ld.batches))
	for _, b := range ld.batches {
		if len(b.rows) > 0 {
			waiting = append(waiting, b)
		}
	}
	slices.SortFunc(waiting, func(a, b *loadBatch) int { return cmp.Compare(a.first, b.first) })
	for _, b := range waiting {
		if err := ld.flush(b); err != nil {
			return err
		}
	}
	return nil
}

// flush sends b's rows as one INSERT, as the session's own prepared
// statement, and files its conditions under the file's rows.
func (ld *load) flush(b *loadBatch) error {
	s := ld.s
	n := len(b.rows)
	pl := ld.plans[n]
	if pl == nil {
		var sb strings.Builder
		sb.Grow(len(ld.head) + n*(len(ld.row)+1))
		sb.WriteString(ld.head)
		for i := range n {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(ld.row)
		}
		var err error
		if pl, err = s.plan(sb.String()); err != nil {
			return err
		}
		ld.plans[n] = pl
	}
	// The batch's conditions apart from the load's, to be placed by row.
	saved, savedDropped := s.diag.take()
	r, err := s.run(pl, b.args, true)
	got, dropped := s.diag.take()
	s.diag.restore(saved, savedDropped)
	if err != nil {
		return classify(err)
	}
	if ld.insertID == 0 {
		ld.insertID = r.InsertId
	}
	if ld.ignore {
		ld.copied += r.AffectedRows
	} else {
		ld.copied += uint64(n)
		ld.deleted += r.AffectedRows - min(r.AffectedRows, uint64(n))
	}
	for _, c := range b.own {
		ld.keep(c)
	}
	ld.condCount += len(b.own)
	ld.placeBackend(b, got)
	if err := ld.advanceSeqs(b); err != nil {
		return err
	}
	ld.condCount += dropped
	ld.buffered -= b.bytes
	b.args, b.rows, b.own, b.bytes, b.maxSeq = b.args[:0], b.rows[:0], b.own[:0], 0, nil
	return nil
}

// advanceSeqs moves im_conv_seq.max_seq of each conversation of a sent
// batch of messages with seqs to at least the largest seq loaded (in the
// batch's transaction when the load runs in one).
func (ld *load) advanceSeqs(b *loadBatch) error {
	if len(b.maxSeq) == 0 {
		return nil
	}
	s := ld.s
	convs := slices.Sorted(maps.Keys(b.maxSeq)) // one lock order
	pl := ld.seqPlans[len(convs)]
	if pl == nil {
		table := sqlq.Ident("im_conv_seq")
		if db := ld.l.Table.Schema.O; db != "" {
			table = sqlq.Ident(db) + "." + table
		}
		var sb strings.Builder
		sb.WriteString("INSERT INTO " + table + " (conv_id, max_seq) VALUES ")
		for i := range convs {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString("(?, ?)")
		}
		sb.WriteString(" ON DUPLICATE KEY UPDATE max_seq = GREATEST(max_seq, VALUES(max_seq))")
		var err error
		if pl, err = s.plan(sb.String()); err != nil {
			return err
		}
		ld.seqPlans[len(convs)] = pl
	}
	args := make([]any, 0, 2*len(convs))
	for _, c := range convs {
		args = append(args, c, b.maxSeq[c])
	}
	saved, savedDropped := s.diag.take()
	_, err := s.run(pl, args, true)
	s.diag.restore(saved, savedDropped)
	return classify(err)
}

var atRow = regexp.MustCompile(` at row (\d+)$`)

// placeBackend files a batch's conditions from the datasource under the
// file's rows: "at row k" counts the INSERT's rows; a condition without a
// row (1062 duplicate) follows the one before it.
func (ld *load) placeBackend(b *loadBatch, ws []Warning) {
	row := 0
	for _, w := range ws {
		if m := atRow.FindStringSubmatch(w.Message); m != nil {
			if k, err := strconv.Atoi(m[1]); err == nil && k >= 1 && k <= len(b.rows) {
				row = k - 1
				w.Message = w.Message[:len(w.Message)-len(m[0])] + fmt.Sprintf(" at row %d", b.rows[row])
			}
		}
		ld.keep(ld.cond(b.rows[row], 1, w))
		ld.condCount++
	}
}

func (ld *load) cond(row uint64, order int, w Warning) loadCond {
	ld.seq++
	return loadCond{row: row, order: order, seq: ld.seq, w: w}
}

// keep holds a condition if it is among the first maxConditions in file
// order.
func (ld *load) keep(c loadCond) {
	less := func(a, b loadCond) int {
		switch {
		case a.row != b.row:
			return cmp.Compare(a.row, b.row)
		case a.order != b.order:
			return a.order - b.order
		}
		return a.seq - b.seq
	}
	at, _ := slices.BinarySearchFunc(ld.conds, c, less)
	if at >= maxConditions {
		return
	}
	ld.conds = slices.Insert(ld.conds, at, c)
	if len(ld.conds) > maxConditions {
		ld.conds = ld.conds[:maxConditions]
	}
}

// report makes the load's conditions the statement's.
func (ld *load) report() {
	ws := make([]Warning, len(ld.conds))
	for i, c := range ld.conds {
		ws[i] = c.w
	}
	ld.s.diag.add(ws, false, ld.condCount-len(ld.conds))
}

// strict reports whether the session's sql_mode is strict (asked once).
func (ld *load) strict() bool {
	if ld.strictMode == nil {
		mode := ""
		_ = ld.s.withDefaultConn(func(c Conn) error {
			r, err := c.Exec("SELECT @@SESSION.sql_mode")
			if err != nil {
				return err
			}
			rows, err := mysqlrow.TextRows(r)
			if len(rows) == 1 {
				mode = string(rows[0][0])
			}
			return err
		})
		strict := strings.Contains(mode, "STRICT_TRANS_TABLES") || strings.Contains(mode, "STRICT_ALL_TABLES")
		ld.strictMode = &strict
	}
	return *ld.strictMode
}
