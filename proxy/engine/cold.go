package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/proxy/mysqlrow"
	"github.com/convoy-im/convoy/proxy/planbuilder"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// ColdTier is the archive of conversation history (the cold tier of
// docs/design.md §9: Parquet files in object storage). cmd/convoy adapts
// archive.Catalog and cold.Reader to it, so the engine links neither
// Parquet nor the object store. Reads honour ctx's deadline (the cold
// budget): cut short they return what is certain with More set, never an
// error; any error means the archive could not be read.
type ColdTier interface {
	// Archived reports whether shard sh may have archived rows (one atomic
	// load; false only when it certainly has none).
	Archived(sh router.Shard) bool
	// Before / After: up to limit archived rows of conv with seq < before
	// (descending) / > after (ascending), seqs in skip left out.
	// files are the shard database's read bounds of conv (ColdFile), read
	// after MySQL's rows: the rows a file may serve. (The tier adds files
	// whose bounds etcd holds, from the archive's former layout.)
	Before(ctx context.Context, conv, before uint64, limit int, files []ColdFile, skip ColdSkip) (ColdPage, error)
	After(ctx context.Context, conv, after uint64, limit int, files []ColdFile, skip ColdSkip) (ColdPage, error)
	// ByKeys: conv's archived rows with a seq in seqs or a msg_id in
	// msgIDs, ascending by seq.
	ByKeys(ctx context.Context, conv uint64, seqs, msgIDs []uint64, files []ColdFile, skip ColdSkip) (ColdPage, error)
	// Keys: the keys of conv's archived rows with seq in [lo, hi],
	// ascending by seq, all of them or an error (a DELETE of a
	// conversation's rows counts and names its archived ones this way).
	Keys(ctx context.Context, conv, lo, hi uint64, files []ColdFile, skip ColdSkip) ([]ColdKey, error)
}

// ColdSkip is what a read treats as absent from the archive: the seqs of
// rows deleted through Convoy (tombstones, ascending) and the seq ranges
// erased from the conversation (ColdErasureTable: inclusive, ascending,
// disjoint).
type ColdSkip struct {
	Seqs   []uint64
	Erased [][2]uint64
}

// ColdKey is one archived row as Keys returns it: its keys, its sender,
// and whether it has a body (msg_content) row.
type ColdKey struct {
	Seq, MsgID, Sender uint64
	Body               bool
}

// ColdFile is what a cold file may serve of a conversation, as the shard
// database's read bounds say (ColdFilesTable, written by the archiver in
// the transaction that deletes the warm rows): seqs MinSeq..MaxSeq, msg_ids
// within MinMsgID..MaxMsgID, at most Rows rows.
type ColdFile struct {
	Key                string
	MinSeq, MaxSeq     uint64
	MinMsgID, MaxMsgID uint64
	Rows               int64
}

// ColdColumn is a column definition an archived row was stored with.
type ColdColumn struct {
	Name     string
	Type     uint8
	Flags    uint16
	Decimals uint8
}

// ColdPage is one answer of the cold tier: conv_msg rows with their
// msg_content rows, values as MySQL's text protocol sent them.
type ColdPage struct {
	Msg, Content []ColdColumn
	Rows         []ColdRow
	// More: the budget cut the read short. Before returned every row
	// above Frontier, After every one below it; ByKeys rows are right but
	// some files were not searched.
	More     bool
	Frontier uint64
}

// ColdRow is one archived message; Content is nil when it had no body row.
type ColdRow struct {
	Seq, MsgID   uint64
	Msg, Content [][]byte
}

// The cold tier's tables in each shard's database (router's companion
// tables, created by the archiver): per conversation the seq range of its
// archived rows whose warm copy is gone, written in the transaction that
// deleted them; and the archived rows deleted through Convoy, written in
// the deleting statement's transaction (coldwrite.go).
const (
	ColdRangesTable    = router.ColdRangesTable
	ColdTombstoneTable = router.ColdTombstoneTable
	ColdFilesTable     = router.ColdFilesTable
	ColdErasureTable   = router.ColdErasureTable
)

// coldState is the engine side of the cold tier.
type coldState struct {
	tier   ColdTier
	budget time.Duration
	// partialError is the sessions' default for a history read whose
	// archived part is incomplete: an error (ColdOptions.PartialError)
	// instead of the rows found and a warning.
	partialError bool
	// writeTimeout bounds a write's look into the archive: a write must
	// know whether it names archived rows, so it waits longer than a read
	// (and fails, changing nothing, if the archive does not answer).
	writeTimeout time.Duration
}

// SetColdTier enables the cold read path: history reads that run below
// what MySQL holds continue into the archive within budget per statement
// (default 800 ms, docs/design.md §9; seed 000: 冷层查询必须异步化：
// 接口超时 800ms，取到多少返回多少并带上 has_more), and writes naming archived
// rows are checked against it. Call before serving.
func (e *Engine) SetColdTier(t ColdTier, o ColdOptions) {
	budget := o.Budget
	if budget <= 0 {
		budget = 800 * time.Millisecond
	}
	e.cold = &coldState{tier: t, budget: budget, partialError: o.PartialError, writeTimeout: max(10*time.Second, budget)}
}

// ColdOptions are the cold read path's settings (cold.budget,
// cold.partial).
type ColdOptions struct {
	// Budget bounds a history read's look into the archive, from its
	// first lookup in MySQL (default 800 ms).
	Budget time.Duration
	// PartialError makes an incomplete page an error by default
	// (ColdPartialVar): most drivers and ORMs never read warnings, so a
	// short page with warning 1931 looks like the start of the
	// conversation to them, and clients cache it.
	PartialError bool
}

// ColdPartialVar is the session variable (SET [SESSION] convoy_cold_partial
// = 'warning' | 'error' | DEFAULT) that chooses what a history read whose
// archived part is incomplete returns: the rows found and warning 1931
// naming where to continue, or error 1969 (SQLSTATE 70100, a timeout to
// drivers) with the same text and no rows. Drivers set it on connect
// (go-sql-driver: the DSN parameter convoy_cold_partial=%27error%27;
// Connector/J: sessionVariables=convoy_cold_partial='error').
const ColdPartialVar = "convoy_cold_partial"

// coldIncomplete reports an incomplete history read: the warning, or the
// error when the session asked for one.
func (s *Session) coldIncomplete(w Warning) error {
	if s.coldPartialError() {
		return &sqlerr.Error{Code: sqlerr.ColdIncomplete, Msg: w.Message}
	}
	s.warn(w)
	return nil
}

// coldPartialError is the session's choice, else the engine's default.
func (s *Session) coldPartialError() bool {
	if s.coldPartial != nil {
		return *s.coldPartial
	}
	return s.e.cold != nil && s.e.cold.partialError
}

// coldPartialValue reads a SET convoy_cold_partial value ('error': true;
// DEFAULT: nil).
func coldPartialValue(value string) (*bool, error) {
	switch v := strings.ToLower(unquote(value)); v {
	case "warning", "error":
		on := v == "error"
		return &on, nil
	case "default":
		return nil, nil
	}
	return nil, &mysql.MyError{Code: mysql.ER_WRONG_VALUE_FOR_VAR, State: "42000",
		Message: fmt.Sprintf("Variable '%s' can't be set to the value of '%s' (want 'warning' or 'error')", ColdPartialVar, unquote(value))}
}

// ColdWarningCode is the warning a history read carries when archived rows
// may be missing from it (the budget ran out, the archive did not answer):
// MariaDB's ER_QUERY_EXCEEDED_ROWS_EXAMINED_LIMIT, the server's own way of
// saying "the query result may be incomplete" with a partial result. The
// message ends with where to continue: "continue with seq < N" (scroll
// up), "continue with seq > N" (catch up) or "retry" (a jump or a body
// fetch).
const ColdWarningCode = 1931

// coldFallback warns that a read of conv's history reads MySQL only
// (why: what keeps the cold tier from continuing it) when the conversation
// has archived rows whose warm copy is gone. Shards never archived cost
// nothing; others one lookup of the conversation's archived range.
func (s *Session) coldFallback(conv uint64, why string) {
	if !s.e.cold.tier.Archived(router.ShardOf(conv)) {
		return
	}
	rg, err := s.archivedRange(conv)
	switch {
	case err != nil:
		s.e.log.Warn("cold tier: the archived ranges could not be read", zap.Error(err))
		s.warn(Warning{Level: "Warning", Code: ColdWarningCode, Message: fmt.Sprintf(
			"The query result may be incomplete: archived history (cold tier) of conversation %d may exist and is not included: %s", conv, why)})
	case rg.has:
		s.e.metrics.coldDecision("mysql_only")
		s.warn(Warning{Level: "Warning", Code: ColdWarningCode, Message: fmt.Sprintf(
			"The query result may be incomplete: archived history (cold tier) of conversation %d (seqs %d..%d) is not included: %s", conv, rg.lo, rg.hi, why)})
	}
}

// archivedRange reads conv's archived range on a connection of its shard
// (coldLookup), released after.
func (s *Session) archivedRange(conv uint64) (coldRange, error) {
	lk, err := s.coldLookup(router.ShardOf(conv))
	if err != nil {
		return coldRange{}, err
	}
	defer lk.release()
	rg, err := lk.ranges(conv)
	if err != nil {
		s.afterError(lk.c, err)
	}
	return rg, err
}

// coldOnlyShapes says which reads the cold tier continues, for
// coldFallback's message.
const coldOnlyShapes = "only seq < ? ORDER BY seq DESC LIMIT n, seq > ? ORDER BY seq LIMIT n, msg_id = ? on conv_msg and msg_id = ? | IN (...) on msg_content continue into the archive"

// Read shapes, as metrics and messages name them.
const (
	shapeBefore = "before"
	shapeAfter  = "after"
	shapeAnchor = "anchor"
	shapeBodies = "bodies"
)

// coldQuery is one execution of an ArchiveRead with MySQL's answer.
type coldQuery struct {
	shape  string
	conv   uint64
	cursor uint64   // before / after: the seq bound; anchor: the msg_id
	limit  int      // before / after
	ids    []uint64 // bodies: the msg_ids asked for, distinct, ascending
	key    int      // r.Fields index of the row key: seq (pages, anchor) or msg_id (bodies)
	warm   []uint64 // each warm row's key, in the result's order
}

// readSharded runs a SELECT on the shards, then continues it into the
// archive when it is a history read whose page MySQL alone cannot answer.
func (s *Session) readSharded(pl *plan, args []any, binary bool) (*mysql.Result, error) {
	r, err := s.runSharded(pl, args, binary)
	if err != nil || s.e.cold == nil || pl.Cold == nil {
		return r, err
	}
	if pl.Cold.Other != nil {
		if conv, err := keyOf(*pl.Cold.Other, args); err == nil {
			s.coldFallback(conv, "this read's shape reads MySQL only ("+coldOnlyShapes+")")
		}
		return r, nil
	}
	if pl.Cold.Read == nil {
		return r, nil
	}
	return s.coldRead(pl.Cold.Read, args, binary, r)
}

// coldRead decides whether archived rows may belong in MySQL's answer r
// and, if so, merges them in (see the README's cold tier section for the
// rules). It never fails the statement: what the archive could not give
// in time is a warning naming where to continue (or, when the session
// asked for it, an error with the same text: coldIncomplete).
func (s *Session) coldRead(c *rewrite.ArchiveRead, args []any, binary bool, r *mysql.Result) (*mysql.Result, error) {
	q, why := newColdQuery(c, args, r, binary)
	if q == nil {
		if why != "" {
			if conv, err := keyOf(c.ConvID, args); err == nil {
				s.coldFallback(conv, why)
			}
		}
		return r, nil
	}
	sh := router.ShardOf(q.conv)
	if !s.e.cold.tier.Archived(sh) {
		return r, nil // a shard never archived: nothing to check, nothing paid
	}
	m := s.e.metrics
	lo, hi, seqs := q.window()
	if q.covered(lo, hi) {
		m.coldDecision("page")
		return r, nil
	}
	// The budget runs from here: the range and tombstone lookups in MySQL
	// count in it, not only the archive's reads.
	deadline := time.Now().Add(s.e.cold.budget)
	lk, err := s.coldLookup(sh)
	var rg coldRange
	if err == nil {
		defer lk.release()
		if rg, err = lk.ranges(q.conv); err != nil {
			s.afterError(lk.c, err)
		}
	}
	if interrupted(err) {
		return nil, err // KILL QUERY: the statement fails, as on MariaDB
	}
	if err != nil {
		s.e.log.Warn("cold tier: the archived ranges could not be read; the page is MySQL's alone", zap.Error(err))
		m.coldRead(q.shape, false, "unavailable", 0)
		return r, s.coldIncomplete(q.incomplete("its archived ranges could not be read", q.cursor))
	}
	if rg.has && seqs {
		lo, hi = max(lo, rg.lo), min(hi, rg.hi)
	}
	if !rg.has || seqs && q.covered(lo, hi) {
		m.coldDecision("ranges")
		return r, nil
	}
	m.coldDecision("cold")
	first := q.shape == shapeBefore && q.cursor > max(rg.warmMax, rg.hi)
	start := time.Now()
	out, result, err := s.coldMerge(q, r, binary, lk, rg, lo, hi, deadline)
	m.coldRead(q.shape, first, result, time.Since(start))
	return out, err
}

// newColdQuery reads the cursor, limit and msg_ids of one execution and the
// key of every warm row; nil when the result cannot be continued, with
// why when the client should hear of it (no key column in the result: the
// seed's reads all select seq, body fetches msg_id; a page over 2^20
// rows).
func newColdQuery(c *rewrite.ArchiveRead, args []any, r *mysql.Result, binary bool) (*coldQuery, string) {
	if r == nil || r.Resultset == nil {
		return nil, ""
	}
	q := &coldQuery{}
	var err error
	if q.conv, err = keyOf(c.ConvID, args); err != nil {
		return nil, ""
	}
	keyName := "seq"
	switch c.Dir {
	case rewrite.HistoryBefore, rewrite.HistoryAfter:
		q.shape = shapeBefore
		if c.Dir == rewrite.HistoryAfter {
			q.shape = shapeAfter
		}
		limit, err := keyOf(c.Limit, args)
		if err != nil {
			return nil, ""
		}
		if limit > 1<<20 {
			return nil, fmt.Sprintf("LIMIT %d is over the archive's page bound (1048576)", limit)
		}
		q.limit = int(limit)
		if q.cursor, err = keyOf(c.Cursor, args); err != nil {
			return nil, ""
		}
		if c.Inclusive {
			// seq <= v is seq < v+1; seq >= v is seq > v-1 (seq 0 is never
			// archived, so seq >= 0 reads as seq > 0 here).
			switch {
			case q.shape == shapeBefore && q.cursor < math.MaxUint64:
				q.cursor++
			case q.shape == shapeAfter && q.cursor > 0:
				q.cursor--
			}
		}
	case rewrite.HistoryAnchor:
		q.shape = shapeAnchor
		if q.cursor, err = keyOf(c.Cursor, args); err != nil {
			return nil, ""
		}
	default:
		q.shape, keyName = shapeBodies, "msg_id"
		for _, v := range c.MsgIDs {
			id, err := keyOf(v, args)
			if err != nil {
				return nil, ""
			}
			q.ids = append(q.ids, id)
		}
		slices.Sort(q.ids)
		q.ids = slices.Compact(q.ids)
	}
	q.key = slices.IndexFunc(r.Fields, func(f *mysql.Field) bool { return string(f.OrgName) == keyName })
	q.warm = make([]uint64, 0, len(r.RowDatas))
	if q.key < 0 {
		// An anchor needs no key: MySQL has the row or not. A page or a
		// body fetch without its key column cannot be merged.
		if q.shape != shapeAnchor {
			return nil, fmt.Sprintf("the select list has no %s column to continue from", keyName)
		}
		for range r.RowDatas {
			q.warm = append(q.warm, 0)
		}
		return q, ""
	}
	for _, row := range r.RowDatas {
		k, ok := rowKey(row, r.Fields, q.key, binary)
		if !ok {
			return nil, ""
		}
		q.warm = append(q.warm, k)
	}
	return q, ""
}

// rowKey reads an unsigned integer column of a result row.
func rowKey(row mysql.RowData, fields []*mysql.Field, col int, binary bool) (uint64, bool) {
	vals, err := row.Parse(fields, binary, nil)
	if err != nil || col >= len(vals) {
		return 0, false
	}
	switch v := vals[col]; v.Type {
	case mysql.FieldValueTypeUnsigned:
		return v.AsUint64(), true
	case mysql.FieldValueTypeSigned:
		return uint64(v.AsInt64()), v.AsInt64() >= 0
	case mysql.FieldValueTypeString:
		u, err := strconv.ParseUint(string(v.AsString()), 10, 64)
		return u, err == nil
	}
	return 0, false
}

// window is the seq range [lo, hi] where an archived row would change a
// page: Before, seqs below the cursor and above the page's last row when
// the page is full; After, above the cursor and below the last row when
// full. ok false for anchors and bodies, which have no seq window (MySQL
// not having the row is then the only question). Archived rows have seqs
// >= 1 (the archiver leaves seq 0 warm).
func (q *coldQuery) window() (lo, hi uint64, ok bool) {
	n := len(q.warm)
	switch q.shape {
	case shapeBefore:
		if q.cursor <= 1 || q.limit == 0 {
			return 1, 0, true
		}
		lo, hi = 1, q.cursor-1
		if n >= q.limit {
			lo = q.warm[n-1] + 1
		}
		return lo, hi, true
	case shapeAfter:
		if q.cursor == ^uint64(0) || q.limit == 0 {
			return 1, 0, true
		}
		lo, hi = q.cursor+1, ^uint64(0)
		if n >= q.limit {
			hi = q.warm[n-1] - 1
		}
		return lo, hi, true
	}
	return 0, 0, false
}

// covered reports whether every seq in [lo, hi] is a warm row of the page
// (an archived row there would have a warm row's seq: its copy is skipped
// or superseded), so no archived row can belong in the page: the whole
// check for a full page of consecutive seqs, the common case. Anchors and
// bodies are covered when MySQL returned every row asked for.
func (q *coldQuery) covered(lo, hi uint64) bool {
	switch q.shape {
	case shapeAnchor:
		return len(q.warm) > 0
	case shapeBodies:
		return len(q.warm) >= len(q.ids) && len(q.missingIDs()) == 0
	}
	if lo > hi {
		return true
	}
	if hi-lo >= uint64(len(q.warm)) {
		return false
	}
	n := uint64(0)
	for _, s := range q.warm {
		if s >= lo && s <= hi {
			n++
		}
	}
	return n == hi-lo+1
}

// missingIDs are the msg_ids a body fetch asked for that MySQL did not return.
func (q *coldQuery) missingIDs() []uint64 {
	var out []uint64
	for _, id := range q.ids {
		if !slices.Contains(q.warm, id) {
			out = append(out, id)
		}
	}
	return out
}

// coldRange is what MySQL says of a conversation's archive: the seq range
// of its archived rows whose warm copy is gone (has false: none), and its
// highest warm seq (0 if none), which tells a first screen.
type coldRange struct {
	has     bool
	lo, hi  uint64
	warmMax uint64
}

// coldLookup reads a shard's cold-tier tables in MySQL on one connection.
type coldLookup struct {
	c       Conn
	db      string // quoted database of the shard
	table   string // quoted physical conv_msg table
	release func()
	// lock makes every read a locking one (LOCK IN SHARE MODE): a write's
	// lookups inside a client's transaction must see what is committed
	// now, not the transaction's older snapshot (a delete chunk of the
	// archiver may have moved rows to the archive since), and keep it so
	// until the write commits.
	lock bool
}

// locking is the suffix of lk's reads.
func (lk *coldLookup) locking() string {
	if lk.lock {
		return " LOCK IN SHARE MODE"
	}
	return ""
}

// coldLookup is a lookup on a pooled connection to sh's authoritative side.
func (e *Engine) coldLookup(sh router.Shard) (*coldLookup, error) {
	p := e.routes.Current().Physical(planbuilder.HistoryTable, sh)
	c, err := e.acquire(p.Datasource)
	if err != nil {
		return nil, err
	}
	return &coldLookup{c: c, db: sqlq.Ident(p.Database), table: sqlq.Ident(p.Table), release: c.Release}, nil
}

// coldLookup is the session's lookup for sh: on its transaction's
// connection when the transaction is pinned to sh (the lookups then see the
// transaction's snapshot, as its reads do, and its own tombstones), else
// pooled.
func (s *Session) coldLookup(sh router.Shard) (*coldLookup, error) {
	if c := s.txn.conn; c != nil && s.txn.pin == int(sh) {
		p := s.e.routes.Current().Physical(planbuilder.HistoryTable, sh)
		return &coldLookup{c: c, db: sqlq.Ident(p.Database), table: sqlq.Ident(p.Table), release: func() {}}, nil
	}
	return s.e.coldLookup(sh)
}

// ranges reads conv's coldRange: one statement of three primary-key
// lookups.
func (lk *coldLookup) ranges(conv uint64) (coldRange, error) {
	ranges := lk.db + "." + sqlq.Ident(ColdRangesTable)
	sql := fmt.Sprintf("SELECT (SELECT MAX(seq) FROM %s.%s WHERE conv_id = %d), (SELECT min_seq FROM %s WHERE conv_id = %d), (SELECT max_seq FROM %s WHERE conv_id = %d)",
		lk.db, lk.table, conv, ranges, conv, ranges, conv)
	if lk.lock {
		// The range row alone, locked; a write needs no warm max. (None:
		// no row, which the locking read also locks the gap of.)
		sql = fmt.Sprintf("SELECT NULL, min_seq, max_seq FROM %s WHERE conv_id = %d LOCK IN SHARE MODE", ranges, conv)
	}
	r, err := lk.c.Exec(sql)
	var me *mysql.MyError
	if errors.As(err, &me) && me.Code == mysql.ER_NO_SUCH_TABLE {
		// The archiver creates the table before it catalogues the shard's
		// first file; without it nothing of the database is archived.
		return coldRange{}, nil
	}
	if err != nil {
		return coldRange{}, err
	}
	if r == nil {
		return coldRange{}, fmt.Errorf("[BUG] cold ranges: no answer")
	}
	if err := decodeRows(r); err == nil && lk.lock && len(r.Values) == 0 {
		return coldRange{}, nil
	}
	if err := decodeRows(r); err != nil || len(r.Values) != 1 || len(r.Values[0]) != 3 {
		return coldRange{}, fmt.Errorf("[BUG] cold ranges: unexpected answer (%v)", err)
	}
	v := r.Values[0]
	var out coldRange
	out.warmMax, _ = fieldUint(v[0])
	lo, okLo := fieldUint(v[1])
	hi, okHi := fieldUint(v[2])
	if okLo && okHi {
		out.has, out.lo, out.hi = true, lo, hi
	}
	return out, nil
}

// fieldUint reads a decoded text-protocol value as an unsigned integer
// (false for NULL).
func fieldUint(v mysql.FieldValue) (uint64, bool) {
	switch v.Type {
	case mysql.FieldValueTypeUnsigned:
		return v.AsUint64(), true
	case mysql.FieldValueTypeSigned:
		return uint64(v.AsInt64()), true
	case mysql.FieldValueTypeString:
		u, err := strconv.ParseUint(string(v.AsString()), 10, 64)
		return u, err == nil
	}
	return 0, false
}

// files reads conv's read bounds (ColdFilesTable): the files that may
// serve seqs in [lo, hi], or (ids set) msg_ids among ids. Read after
// MySQL's rows and before the tombstones: a delete chunk committed in
// between has its tombstones seen, one committed after left its rows in
// the read of MySQL.
func (lk *coldLookup) files(conv uint64, lo, hi uint64, ids []uint64) ([]ColdFile, error) {
	where := fmt.Sprintf("max_seq >= %d AND min_seq <= %d", lo, hi)
	if ids != nil {
		if len(ids) == 0 {
			return nil, nil
		}
		where = fmt.Sprintf("max_msg_id >= %d AND min_msg_id <= %d", slices.Min(ids), slices.Max(ids))
	}
	r, err := lk.c.Exec(fmt.Sprintf("SELECT file, min_seq, max_seq, min_msg_id, max_msg_id, n_rows FROM %s.%s WHERE conv_id = %d AND %s%s",
		lk.db, sqlq.Ident(ColdFilesTable), conv, where, lk.locking()))
	var me *mysql.MyError
	if errors.As(err, &me) && me.Code == mysql.ER_NO_SUCH_TABLE {
		return nil, nil // made by an archiver of this version: none deleted since
	}
	if err != nil {
		return nil, err
	}
	if err := decodeRows(r); err != nil {
		return nil, err
	}
	out := make([]ColdFile, 0, len(r.Values))
	for _, v := range r.Values {
		f := ColdFile{Key: string(v[0].AsString())}
		var ok [5]bool
		f.MinSeq, ok[0] = fieldUint(v[1])
		f.MaxSeq, ok[1] = fieldUint(v[2])
		f.MinMsgID, ok[2] = fieldUint(v[3])
		f.MaxMsgID, ok[3] = fieldUint(v[4])
		var n uint64
		n, ok[4] = fieldUint(v[5])
		if slices.Contains(ok[:], false) || f.Key == "" {
			return nil, fmt.Errorf("[BUG] cold read bounds row %v", v)
		}
		f.Rows = int64(n)
		out = append(out, f)
	}
	return out, nil
}

// tombstones returns the archived rows of conv deleted through Convoy, in
// table tbl: the seqs in [lo, hi] (conv_msg pages), or of the given msg_ids
// (anchors, bodies), as (seq, msg_id) pairs ascending by seq.
func (lk *coldLookup) tombstones(conv uint64, tbl string, lo, hi uint64, ids []uint64) ([][2]uint64, error) {
	where := fmt.Sprintf("seq BETWEEN %d AND %d", lo, hi)
	if ids != nil {
		where = "msg_id IN (" + joinUints(ids) + ")"
	}
	r, err := lk.c.Exec(fmt.Sprintf("SELECT seq, msg_id FROM %s.%s WHERE conv_id = %d AND tbl = '%s' AND %s ORDER BY seq%s",
		lk.db, sqlq.Ident(ColdTombstoneTable), conv, tbl, where, lk.locking()))
	if err != nil {
		return nil, err
	}
	if err := decodeRows(r); err != nil {
		return nil, err
	}
	out := make([][2]uint64, 0, len(r.Values))
	for _, v := range r.Values {
		seq, ok1 := fieldUint(v[0])
		id, ok2 := fieldUint(v[1])
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("[BUG] tombstone row %v", v)
		}
		out = append(out, [2]uint64{seq, id})
	}
	return out, nil
}

// erasures returns the seq ranges of conv erased from table tbl's
// archived rows (ColdErasureTable), merged: ascending and disjoint.
func (lk *coldLookup) erasures(conv uint64, tbl string) ([][2]uint64, error) {
	r, err := lk.c.Exec(fmt.Sprintf("SELECT min_seq, max_seq FROM %s.%s WHERE conv_id = %d AND tbl = '%s' ORDER BY min_seq%s",
		lk.db, sqlq.Ident(ColdErasureTable), conv, tbl, lk.locking()))
	var me *mysql.MyError
	if errors.As(err, &me) && me.Code == mysql.ER_NO_SUCH_TABLE {
		return nil, nil // made by an archiver before erasures: none
	}
	if err != nil {
		return nil, err
	}
	if err := decodeRows(r); err != nil {
		return nil, err
	}
	var out [][2]uint64
	for _, v := range r.Values {
		lo, ok1 := fieldUint(v[0])
		hi, ok2 := fieldUint(v[1])
		if !ok1 || !ok2 || lo > hi {
			return nil, fmt.Errorf("[BUG] erasure row %v", v)
		}
		if n := len(out); n > 0 && (out[n-1][1] == math.MaxUint64 || lo <= out[n-1][1]+1) {
			out[n-1][1] = max(out[n-1][1], hi)
			continue
		}
		out = append(out, [2]uint64{lo, hi})
	}
	return out, nil
}

func joinUints(xs []uint64) string {
	var b strings.Builder
	for i, x := range xs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(x, 10))
	}
	return b.String()
}

// coldMerge reads the archive for q within the budget and merges its rows
// into MySQL's answer r; result is complete, partial (the budget, which
// ends at deadline, ran out) or unavailable (the archive did not answer);
// err is coldIncomplete's when it is not complete.
func (s *Session) coldMerge(q *coldQuery, r *mysql.Result, binary bool, lk *coldLookup, rg coldRange, lo, hi uint64, deadline time.Time) (*mysql.Result, string, error) {
	tier := s.e.cold.tier
	tbl := planbuilder.HistoryTable
	var files []ColdFile
	var tomb [][2]uint64
	var err error
	// The read bounds first, then the tombstones (see coldLookup.files).
	switch q.shape {
	case shapeBefore, shapeAfter:
		if files, err = lk.files(q.conv, lo, hi, nil); err == nil {
			tomb, err = lk.tombstones(q.conv, tbl, lo, hi, nil)
		}
	case shapeAnchor:
		if files, err = lk.files(q.conv, 0, 0, []uint64{q.cursor}); err == nil {
			tomb, err = lk.tombstones(q.conv, tbl, 0, 0, []uint64{q.cursor})
		}
	case shapeBodies:
		tbl = "msg_content"
		if files, err = lk.files(q.conv, 0, 0, q.missingIDs()); err == nil {
			tomb, err = lk.tombstones(q.conv, tbl, 0, 0, q.missingIDs())
		}
	}
	var erased [][2]uint64
	if err == nil {
		erased, err = lk.erasures(q.conv, tbl)
	}
	if err != nil {
		s.afterError(lk.c, err)
		if interrupted(err) {
			return nil, "killed", err
		}
		s.e.log.Warn("cold tier: the read bounds or tombstones could not be read; the page is MySQL's alone", zap.Error(err))
		return r, "unavailable", s.coldIncomplete(q.incomplete("its deleted-row list could not be read", q.cursor))
	}
	skip := ColdSkip{Seqs: make([]uint64, len(tomb)), Erased: erased}
	for i, t := range tomb {
		skip.Seqs[i] = t[0]
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	ctx, killed := s.interruptible(ctx)
	var page ColdPage
	var ids []uint64 // the msg_ids looked up
	switch q.shape {
	case shapeBefore:
		page, err = tier.Before(ctx, q.conv, q.cursor, q.limit, files, skip)
	case shapeAfter:
		page, err = tier.After(ctx, q.conv, q.cursor, q.limit, files, skip)
	case shapeAnchor:
		ids = []uint64{q.cursor}
		page, err = tier.ByKeys(ctx, q.conv, nil, ids, files, skip)
	case shapeBodies:
		ids = slices.DeleteFunc(q.missingIDs(), func(id uint64) bool {
			return slices.ContainsFunc(tomb, func(t [2]uint64) bool { return t[1] == id })
		})
		if len(ids) > 0 {
			page, err = tier.ByKeys(ctx, q.conv, nil, ids, files, ColdSkip{Erased: erased})
		}
	}
	if killed() {
		return nil, "killed", sqlerr.Errorf(sqlerr.QueryInterrupted, "Query execution was interrupted: KILL while the archive (cold tier) of conversation %d was read", q.conv)
	}
	result := "complete"
	var reason string
	switch {
	case err != nil:
		// The archive itself failed (store down, a file unreadable): the
		// warm part and the warning, the operator's log line, never an
		// error to the client.
		s.e.log.Warn("cold tier: the archive did not answer; the page is MySQL's part", zap.Error(err))
		page, result, reason = ColdPage{}, "unavailable", "the archive did not answer"
	case page.More && !q.allFound(ids, page):
		result, reason = "partial", fmt.Sprintf("the archive did not answer within cold.budget (%s)", s.e.cold.budget)
	}
	rows, ok := coldRows(q, page, r.Fields, binary)
	if !ok {
		s.e.log.Warn("cold tier: archived rows have other column definitions than MySQL's result; the page is MySQL's part")
		rows, result, reason = nil, "unavailable", "its archived rows were stored with other column definitions"
		page = ColdPage{}
	}
	out, cont := q.merge(r, rows, page, rg, result != "complete")
	s.e.metrics.coldRows(len(rows))
	if result != "complete" {
		return out, result, s.coldIncomplete(q.incomplete(reason, cont))
	}
	return out, result, nil
}

// interrupted: err is the server's 1317, a statement KILL QUERY stopped.
func interrupted(err error) bool {
	var me *mysql.MyError
	return errors.As(err, &me) && me.Code == mysql.ER_QUERY_INTERRUPTED
}

// interruptible returns ctx, also ended by a KILL QUERY of the session
// (its interrupt channel) while it lasts, and whether that is what ended
// it: a wait for the archive (up to cold.budget) stops at once, as a
// statement on MariaDB does. The watcher ends with ctx's parent, which
// the caller must end.
func (s *Session) interruptible(ctx context.Context) (context.Context, func() bool) {
	ctx, cancel := context.WithCancel(ctx)
	var hit atomic.Bool
	go func() {
		select {
		case <-s.interrupt:
			hit.Store(true)
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, hit.Load
}

// allFound: a lookup by msg_id cut short still found every row it was
// for (msg_ids are unique: the files not searched hold none of them).
func (q *coldQuery) allFound(ids []uint64, page ColdPage) bool {
	if len(ids) == 0 {
		return false // a page read: what was not read is not known
	}
	for _, id := range ids {
		if !slices.ContainsFunc(page.Rows, func(r ColdRow) bool { return r.MsgID == id && (q.shape == shapeAnchor || r.Content != nil) }) {
			return false
		}
	}
	return true
}

// keyedRow is one result row with its key (seq or msg_id).
type keyedRow struct {
	key  uint64
	data mysql.RowData
}

// coldRows encodes the archived rows of page for the result's columns, in
// the client's protocol; ok false when a column has no archived
// counterpart of the same type (an ALTER since the rows were archived).
func coldRows(q *coldQuery, page ColdPage, fields []*mysql.Field, binary bool) ([]keyedRow, bool) {
	if len(page.Rows) == 0 {
		return nil, true
	}
	cols, body := page.Msg, false
	if q.shape == shapeBodies {
		cols, body = page.Content, true
	}
	at := make([]int, len(fields))
	for i, f := range fields {
		at[i] = slices.IndexFunc(cols, func(c ColdColumn) bool { return c.Name == string(f.OrgName) })
		if at[i] < 0 {
			return nil, false
		}
		c := cols[at[i]]
		if c.Type != f.Type || c.Flags&mysql.UNSIGNED_FLAG != f.Flag&mysql.UNSIGNED_FLAG || c.Decimals != f.Decimal || binary && !mysqlrow.Convertible(f.Type) {
			return nil, false
		}
	}
	out := make([]keyedRow, 0, len(page.Rows))
	for _, pr := range page.Rows {
		values, key := pr.Msg, pr.Seq
		if body {
			if pr.Content == nil {
				continue // the message had no body row
			}
			values, key = pr.Content, pr.MsgID
		}
		vals := make([][]byte, len(fields))
		for i := range fields {
			vals[i] = values[at[i]]
		}
		if !binary {
			out = append(out, keyedRow{key: key, data: mysqlrow.TextRow(vals)})
			continue
		}
		b := make([]byte, 1+(len(fields)+7+2)/8)
		for i, f := range fields {
			if vals[i] == nil {
				b[1+(i+2)/8] |= 1 << ((i + 2) % 8)
				continue
			}
			var ok bool
			if b, ok = mysqlrow.AppendBinary(b, f, vals[i]); !ok {
				return nil, false
			}
		}
		out = append(out, keyedRow{key: key, data: b})
	}
	return out, true
}

// merge joins MySQL's rows and the archive's in the query's order (a warm
// row wins over an archived copy with the same key) and cuts the page to
// its limit. When the archive's part is incomplete, only the prefix that
// is certain stays, and cont is the seq to continue from: the last row
// kept, else the cursor.
func (q *coldQuery) merge(r *mysql.Result, cold []keyedRow, page ColdPage, rg coldRange, partial bool) (*mysql.Result, uint64) {
	rows := make([]keyedRow, 0, len(r.RowDatas)+len(cold))
	for i, d := range r.RowDatas {
		rows = append(rows, keyedRow{key: q.warm[i], data: d})
	}
	for _, c := range cold {
		if !slices.Contains(q.warm, c.key) {
			rows = append(rows, c)
		}
	}
	desc := q.shape == shapeBefore
	slices.SortStableFunc(rows, func(a, b keyedRow) int {
		if desc {
			return cmp.Compare(b.key, a.key)
		}
		return cmp.Compare(a.key, b.key)
	})
	if q.limit > 0 && len(rows) > q.limit && (q.shape == shapeBefore || q.shape == shapeAfter) {
		rows = rows[:q.limit]
	}
	cont := q.cursor
	if partial {
		// A row is certain above every archived seq (below, catching up),
		// or beyond the reader's frontier when it read part of the files.
		switch q.shape {
		case shapeBefore:
			frontier := rg.hi
			if page.More {
				frontier = min(frontier, page.Frontier)
			}
			rows = slices.DeleteFunc(rows, func(k keyedRow) bool { return k.key <= frontier })
		case shapeAfter:
			frontier := rg.lo
			if page.More {
				frontier = max(frontier, page.Frontier)
			}
			rows = slices.DeleteFunc(rows, func(k keyedRow) bool { return k.key >= frontier })
		}
		if n := len(rows); n > 0 && (q.shape == shapeBefore || q.shape == shapeAfter) {
			cont = rows[n-1].key
		}
	}
	out := &mysql.Result{Status: r.Status, Resultset: &mysql.Resultset{Fields: r.Fields, RowDatas: make([]mysql.RowData, len(rows))}}
	for i, k := range rows {
		out.RowDatas[i] = k.data
	}
	out.AffectedRows = uint64(len(rows))
	return out, cont
}

// incomplete is the warning of a result that may lack archived rows: why,
// and where to continue (the seq of the last row that is certain, else the
// cursor: the same page again).
func (q *coldQuery) incomplete(reason string, cont uint64) Warning {
	var next string
	switch q.shape {
	case shapeBefore:
		next = fmt.Sprintf("continue with seq < %d", cont)
	case shapeAfter:
		next = fmt.Sprintf("continue with seq > %d", cont)
	case shapeAnchor:
		next = fmt.Sprintf("retry (msg_id %d of conversation %d)", q.cursor, q.conv)
	default:
		next = fmt.Sprintf("retry (bodies of conversation %d)", q.conv)
	}
	return Warning{Level: "Warning", Code: ColdWarningCode,
		Message: fmt.Sprintf("The query result may be incomplete: archived history (cold tier) of conversation %d: %s; %s", q.conv, reason, next)}
}
