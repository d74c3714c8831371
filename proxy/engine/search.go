package engine

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/histcache"
	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// Message search (docs/design.md §10; seed 000: "检索"): SELECT ... FROM
// msg_search WHERE uid = ? AND MATCH(text) AGAINST (?) ... is answered here,
// never sent to a datasource. The conversations the uid may search are read
// from im_conv_member on the uid's shard, through the routes like any read,
// and go into the index query: a client never names them (a conv_id condition
// narrows the search to one conversation the uid must be a member of). The
// index answers for messages older than the fresh window; the window
// (search.fresh_window, default 5 min) is read from the permitted
// conversations' msg_content in MySQL and matched by brute force, so a
// message is found before the index has it, and an edit, recall or delete of
// a recent message shows at once. Older messages' deletes and recalls show
// once the index has them (its soft-delete flag; seconds).

// MessageSearch is the search index as the engine uses it (package search,
// wired by cmd/convoy; the engine does not import it).
type MessageSearch interface {
	// Search returns the index's hits for q, newest first.
	Search(ctx context.Context, q SearchQuery) ([]SearchHit, error)
	// Counts returns the index's matches of q per conversation (its
	// cursor, order and limit aside); conversations without one absent.
	Counts(ctx context.Context, q SearchQuery) (map[uint64]int64, error)
	// Matcher compiles a query text for the fresh window: match reports
	// whether a body read from msg_content (its msg_type and content)
	// yields text that matches. nil, nil: the text has nothing to match
	// (the search has no hits, as MATCH ... AGAINST ('') in MySQL).
	Matcher(text string) (match func(msgType uint8, body []byte) bool, err error)
	// Unready lists the datasources whose messages the index does not
	// hold yet (a new or rebuilt index still being built): a search's
	// answer may miss theirs. Cheap: called by every search.
	Unready(ctx context.Context) ([]string, error)
}

// SearchQuery is one index query; see package search's Query.
type SearchQuery struct {
	Text       string
	Convs      []uint64
	MsgType    uint8
	HasMsgType bool
	SinceMs    int64
	HasSince   bool
	BeforeMs   int64
	HasBefore  bool
	// SenderUID, the cursor (the previous page's last hit) and Asc: see
	// package search's Query (the fields match it one for one).
	SenderUID   uint64
	HasSender   bool
	CursorMs    int64
	CursorMsgID uint64
	HasCursor   bool
	Asc         bool
	Limit       int
}

// keeps reports whether h passes the sender and cursor conditions, and
// the user's upper bound (untilMs, exclusive, when hasUntil): the fresh
// window's read leaves those to Go.
func (q *SearchQuery) keeps(h SearchHit, untilMs int64, hasUntil bool) bool {
	switch {
	case q.HasSender && h.SenderUID != q.SenderUID, hasUntil && h.CreatedMs >= untilMs:
		return false
	case !q.HasCursor:
		return true
	case q.Asc:
		return h.CreatedMs > q.CursorMs || h.CreatedMs == q.CursorMs && h.MsgID > q.CursorMsgID
	}
	return h.CreatedMs < q.CursorMs || h.CreatedMs == q.CursorMs && h.MsgID < q.CursorMsgID
}

// SearchHit is one message found: the anchors a result row carries.
type SearchHit struct {
	MsgID, ConvID, Seq, SenderUID uint64
	MsgType                       uint8
	CreatedMs                     int64
}

// SearchOptions configure the query path.
type SearchOptions struct {
	// FreshWindow is how far back MySQL is read for messages the index
	// may not have yet (default 5 minutes; the seed's "最近 5 分钟").
	FreshWindow time.Duration
	// Timeout bounds one search (default 5 s).
	Timeout time.Duration
}

// searchMaxLimit bounds a search's LIMIT (package search's MaxLimit).
const searchMaxLimit = 1000

type searchState struct {
	idx MessageSearch
	opt SearchOptions
}

// SetSearch enables msg_search; call before serving. Without it a query
// of msg_search gets 1235 saying search is not enabled.
func (e *Engine) SetSearch(idx MessageSearch, opt SearchOptions) {
	if opt.FreshWindow <= 0 {
		opt.FreshWindow = 5 * time.Minute
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 5 * time.Second
	}
	e.search = &searchState{idx: idx, opt: opt}
}

// searchFields are the result columns of a msg_search query, typed as the
// conv_msg columns they come from.
func searchFields(cols []string, db string) []*mysql.Field {
	out := make([]*mysql.Field, len(cols))
	for i, c := range cols {
		f := &mysql.Field{Name: []byte(c), OrgName: []byte(c), Table: []byte(rewrite.SearchTable), OrgTable: []byte(rewrite.SearchTable),
			Schema: []byte(db), Charset: 63, Flag: mysql.NOT_NULL_FLAG | mysql.BINARY_FLAG}
		switch c {
		case "created_at":
			f.Type, f.ColumnLength, f.Decimal = mysql.MYSQL_TYPE_DATETIME, 23, 3
		case "msg_type":
			f.Type, f.ColumnLength = mysql.MYSQL_TYPE_TINY, 3
			f.Flag |= mysql.UNSIGNED_FLAG | mysql.NUM_FLAG
		default:
			f.Type, f.ColumnLength = mysql.MYSQL_TYPE_LONGLONG, 20
			f.Flag |= mysql.UNSIGNED_FLAG | mysql.NUM_FLAG
		}
		out[i] = f
	}
	return out
}

// boundSearch is a msg_search query with its values.
type boundSearch struct {
	uid      uint64
	text     string
	conv     uint64
	hasConv  bool
	q        SearchQuery
	sinceMs  int64 // inclusive
	hasSince bool
	untilMs  int64 // exclusive
	hasUntil bool
	// limit is a counts query's LIMIT (0: none).
	limit int
}

func (s *Session) bindSearch(sh *rewrite.Search, args []any) (*boundSearch, error) {
	b := &boundSearch{}
	var err error
	if b.uid, err = keyOf(sh.UID, args); err != nil {
		return nil, err
	}
	if sh.ConvID != nil {
		if b.conv, err = keyOf(*sh.ConvID, args); err != nil {
			return nil, err
		}
		b.hasConv = true
	}
	text, ok := searchString(sh.Text, args)
	if !ok {
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "msg_search: AGAINST takes a string")
	}
	b.text = text
	switch {
	case sh.Counts && !sh.HasLimit:
		b.q.Limit = 1 // (not a page: the index's counts take no limit)
	case sh.Counts:
		lim, err := keyOf(sh.Limit, args)
		if err != nil || lim == 0 || lim > math.MaxInt32 {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "msg_search: LIMIT must be a positive number")
		}
		b.q.Limit, b.limit = 1, int(lim)
	default:
		lim, err := keyOf(sh.Limit, args)
		if err != nil || lim == 0 || lim > searchMaxLimit {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "msg_search: LIMIT must be 1 to %d", searchMaxLimit)
		}
		b.q.Limit = int(lim)
	}
	if sh.MsgType != nil {
		t, err := keyOf(*sh.MsgType, args)
		if err != nil || t > 255 {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "msg_search: msg_type must be 0 to 255")
		}
		b.q.MsgType, b.q.HasMsgType = uint8(t), true
	}
	timeOf := func(v rewrite.Value, what string) (int64, error) {
		text, ok := searchString(v, args)
		ms, err := parseSearchTime(text)
		if !ok || err != nil {
			return 0, sqlerr.Errorf(sqlerr.NotSupported, "msg_search: %s takes a DATETIME ('2026-11-20 08:00:00.000')", what)
		}
		return ms, nil
	}
	if sh.Since != nil {
		ms, err := timeOf(*sh.Since, "created_at >=")
		if err != nil {
			return nil, err
		}
		if sh.SinceAfter {
			ms++ // DATETIME(3): the next millisecond
		}
		b.sinceMs, b.hasSince = ms, true
	}
	if sh.Until != nil {
		ms, err := timeOf(*sh.Until, "created_at <")
		if err != nil {
			return nil, err
		}
		if sh.UntilIncl {
			ms++
		}
		b.untilMs, b.hasUntil = ms, true
	}
	if sh.Sender != nil {
		if b.q.SenderUID, err = keyOf(*sh.Sender, args); err != nil {
			return nil, err
		}
		b.q.HasSender = true
	}
	if c := sh.Cursor; c != nil {
		ms, err := timeOf(c[0], "the cursor's created_at")
		if err != nil {
			return nil, err
		}
		id, err := keyOf(c[1], args)
		if err != nil {
			return nil, err
		}
		b.q.CursorMs, b.q.CursorMsgID, b.q.HasCursor = ms, id, true
	}
	b.q.Asc = sh.Asc
	return b, nil
}

// searchString is a string value: a literal, or a bound string or bytes.
func searchString(v rewrite.Value, args []any) (string, bool) {
	x := v.Lit
	if v.Param >= 0 {
		x = args[v.Param]
	}
	switch t := x.(type) {
	case string:
		return t, true
	case []byte:
		return string(t), true
	}
	return "", false
}

// parseSearchTime reads a DATETIME as the UTC wall-clock time it is stored
// as (DATETIME has no time zone; the hot tier reads it the same way).
func parseSearchTime(s string) (int64, error) {
	for _, layout := range []string{"2006-01-02 15:04:05.999999", "2006-01-02T15:04:05.999999", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UnixMilli(), nil
		}
	}
	return 0, fmt.Errorf("datetime %q", s)
}

// runSearch answers a msg_search query.
func (s *Session) runSearch(pl *plan, args []any, binary bool) (*mysql.Result, error) {
	t0 := time.Now()
	s.e.metrics.countStatement("search")
	r, err := s.search(pl.Search, args, binary)
	s.e.metrics.observeSearch("total", t0, err)
	return r, err
}

func (s *Session) search(sh *rewrite.Search, args []any, binary bool) (*mysql.Result, error) {
	b, err := s.bindSearch(sh, args)
	if err != nil {
		return nil, err
	}
	st := s.e.search
	ctx, cancel := context.WithTimeout(context.Background(), st.opt.Timeout)
	defer cancel()
	fields := searchFields(sh.Columns, s.db)
	match, err := st.idx.Matcher(b.text)
	if err != nil {
		return nil, sqlerr.Errorf(sqlerr.Internal, "msg_search: %v", err)
	}
	var hits []SearchHit
	counts := map[uint64]int64{}
	if match != nil {
		convs, err := s.members(b)
		if err != nil {
			return nil, err
		}
		if len(convs) > 0 {
			if sh.Counts {
				counts, err = s.searchCounts(ctx, b, convs, match)
			} else {
				hits, err = s.searchConvs(ctx, b, convs, match)
			}
			if err != nil {
				return nil, err
			}
			s.warnUnready(ctx)
		}
	}
	if sh.Counts {
		return countsResult(sh, b, counts, binary)
	}
	return searchResult(fields, sh.Columns, hits, binary)
}

// countsResult is a counts query's answer: conv_id and its hits, the
// most hits first (ties: the lower conv_id first) or by conv_id, up to
// the query's limit.
func countsResult(sh *rewrite.Search, b *boundSearch, counts map[uint64]int64, binary bool) (*mysql.Result, error) {
	convs := slices.Collect(maps.Keys(counts))
	slices.SortFunc(convs, func(x, y uint64) int {
		switch {
		case sh.ByConv && sh.Desc:
			return cmp.Compare(y, x)
		case sh.ByConv:
			return cmp.Compare(x, y)
		}
		return cmp.Or(cmp.Compare(counts[y], counts[x]), cmp.Compare(x, y))
	})
	if b.limit > 0 && len(convs) > b.limit {
		convs = convs[:b.limit]
	}
	rows := make([][]any, len(convs))
	for i, c := range convs {
		row := []any{c, counts[c]}
		if sh.Columns[0] != "conv_id" {
			row[0], row[1] = row[1], row[0]
		}
		rows[i] = row
	}
	rs, err := mysql.BuildSimpleResultset(sh.Columns, rows, binary)
	if err != nil {
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] msg_search counts: %v", err)
	}
	for _, f := range rs.Fields {
		f.Table, f.OrgTable = []byte(rewrite.SearchTable), []byte(rewrite.SearchTable)
		f.Flag |= mysql.NOT_NULL_FLAG
	}
	return &mysql.Result{Resultset: rs, AffectedRows: uint64(len(convs))}, nil
}

// warnUnready adds warning 1931 to a search the index cannot answer in
// full yet: it is still being built for some datasource.
func (s *Session) warnUnready(ctx context.Context) {
	ds, err := s.e.search.idx.Unready(ctx)
	if err != nil {
		s.e.log.Warn("msg_search: could not tell whether the index is built", zap.Error(err))
		return
	}
	if len(ds) > 0 {
		s.warn(Warning{Level: "Warning", Code: ColdWarningCode, Message: fmt.Sprintf(
			"The query result may be incomplete: the search index is still being built for datasource %s; SHOW SEARCH STATUS says how far", strings.Join(ds, ", "))})
	}
}

// members reads the conversations uid may search from im_conv_member on
// its shard (with conv_id = ?: that one, if uid is a member).
func (s *Session) members(b *boundSearch) ([]uint64, error) {
	t0 := time.Now()
	snap := s.e.routes.Current()
	sh := router.ShardOf(b.uid)
	p := snap.Physical("im_conv_member", sh)
	q := fmt.Sprintf("SELECT conv_id FROM %s.%s WHERE uid = %d", sqlq.Ident(p.Database), sqlq.Ident(p.Table), b.uid)
	if b.hasConv {
		q += " AND conv_id = " + strconv.FormatUint(b.conv, 10)
	}
	c, err := s.acquire(p.Datasource)
	if err != nil {
		s.e.observeRefused(sh, p.Datasource, false, t0, err)
		return nil, err
	}
	start := time.Now()
	r, err := c.Exec(q)
	c.Release()
	s.e.observe(sh, p.Datasource, false, start, err)
	s.e.metrics.observeSearch("members", t0, err)
	if err != nil {
		return nil, err
	}
	if r == nil || r.Resultset == nil || len(r.Fields) != 1 {
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] the im_conv_member read of uid %d did not return one column", b.uid)
	}
	if err := decodeRows(r); err != nil {
		return nil, err
	}
	out := make([]uint64, 0, len(r.Values))
	for i := range r.Values {
		v, err := r.GetUint(i, 0)
		if err != nil {
			return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] im_conv_member.conv_id: %v", err)
		}
		out = append(out, v)
	}
	return out, nil
}

// searchConvs runs the index query (older than the fresh window) and the
// fresh window's MySQL read at once and merges them.
func (s *Session) searchConvs(ctx context.Context, b *boundSearch, convs []uint64, match func(uint8, []byte) bool) ([]SearchHit, error) {
	st := s.e.search
	var idxHits []SearchHit
	freshHits, err := s.searchSplit(ctx, b, convs, match, func(q SearchQuery) (err error) {
		idxHits, err = st.idx.Search(ctx, q)
		return err
	})
	if err != nil {
		return nil, err
	}
	return mergeSearchHits(b.q.Limit, b.q.Asc, freshHits, idxHits), nil
}

// searchCounts is searchConvs for per-conversation hit counts: the
// index's counts older than the fresh window, plus the window's hits.
func (s *Session) searchCounts(ctx context.Context, b *boundSearch, convs []uint64, match func(uint8, []byte) bool) (map[uint64]int64, error) {
	counts := map[uint64]int64{}
	freshHits, err := s.searchSplit(ctx, b, convs, match, func(q SearchQuery) (err error) {
		if c, err := s.e.search.idx.Counts(ctx, q); err != nil {
			return err
		} else if c != nil {
			counts = c
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, h := range freshHits {
		counts[h.ConvID]++
	}
	return counts, nil
}

// searchSplit runs index (given the index's part of b: messages older than
// the fresh window) while it reads the fresh window from MySQL, and
// returns the window's hits.
func (s *Session) searchSplit(ctx context.Context, b *boundSearch, convs []uint64, match func(uint8, []byte) bool, index func(SearchQuery) error) ([]SearchHit, error) {
	st := s.e.search
	fresh := time.Now().Add(-st.opt.FreshWindow).UnixMilli()
	q := b.q
	q.Text, q.Convs = b.text, convs
	q.SinceMs, q.HasSince = b.sinceMs, b.hasSince
	q.BeforeMs, q.HasBefore = fresh, true
	if b.hasUntil {
		q.BeforeMs = min(fresh, b.untilMs)
	}
	var wg sync.WaitGroup
	var idxErr error
	if !b.hasSince || b.sinceMs < q.BeforeMs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			idxErr = index(q)
			s.e.metrics.observeSearch("index", t0, idxErr)
		}()
	}
	from := max(fresh, b.sinceMs)
	var freshHits []SearchHit
	var err error
	if !b.hasUntil || from < b.untilMs {
		t0 := time.Now()
		freshHits, err = s.freshWindow(ctx, convs, from, b.q, match)
		s.e.metrics.observeSearch("fresh", t0, err)
		freshHits = slices.DeleteFunc(freshHits, func(h SearchHit) bool { return !b.q.keeps(h, b.untilMs, b.hasUntil) })
	}
	wg.Wait()
	if idxErr != nil {
		return nil, sqlerr.Errorf(sqlerr.BackendUnavailable, "msg_search: the search index: %v", idxErr)
	}
	return freshHits, err
}

// freshWindow reads the permitted conversations' messages created since
// from (ms) from MySQL and keeps those match accepts: one statement per
// database (a UNION ALL of its physical tables), the databases in parallel.
func (s *Session) freshWindow(ctx context.Context, convs []uint64, from int64, q SearchQuery, match func(uint8, []byte) bool) ([]SearchHit, error) {
	snap := s.e.routes.Current()
	type dbKey struct{ ds, db string }
	tables := map[dbKey]map[string][]uint64{} // database -> msg_content table -> convs
	var order []dbKey
	for _, c := range convs {
		p := snap.Physical("msg_content", router.ShardOf(c))
		k := dbKey{p.Datasource, p.Database}
		if tables[k] == nil {
			tables[k] = map[string][]uint64{}
			order = append(order, k)
		}
		tables[k][p.Table] = append(tables[k][p.Table], c)
	}
	since := time.UnixMilli(from).UTC().Format("2006-01-02 15:04:05.000")
	results := make([][]SearchHit, len(order))
	errs := make([]error, len(order))
	sem := make(chan struct{}, s.e.opt.ScatterParallelism)
	var wg sync.WaitGroup
	for i, k := range order {
		var parts []string
		names := make([]string, 0, len(tables[k]))
		for t := range tables[k] {
			names = append(names, t)
		}
		slices.Sort(names)
		for _, t := range names {
			ids := make([]string, len(tables[k][t]))
			for j, c := range tables[k][t] {
				ids[j] = strconv.FormatUint(c, 10)
			}
			part := fmt.Sprintf("SELECT c.msg_id, c.conv_id, m.seq, c.sender_uid, c.msg_type, c.content, c.created_at FROM %[1]s.%[2]s c "+
				"JOIN %[1]s.%[3]s m ON m.msg_id = c.msg_id WHERE c.conv_id IN (%[4]s) AND c.created_at >= '%[5]s'",
				sqlq.Ident(k.db), sqlq.Ident(t), sqlq.Ident("conv_msg"+t[len("msg_content"):]), strings.Join(ids, ","), since)
			if q.HasMsgType {
				part += " AND c.msg_type = " + strconv.Itoa(int(q.MsgType))
			}
			parts = append(parts, part)
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i], errs[i] = s.freshRead(ctx, k.ds, strings.Join(parts, " UNION ALL "), match)
		}()
	}
	wg.Wait()
	var out []SearchHit
	for i := range order {
		if errs[i] != nil {
			return nil, errs[i]
		}
		out = append(out, results[i]...)
	}
	return out, nil
}

// freshRead runs one database's fresh-window statement.
func (s *Session) freshRead(ctx context.Context, ds, sql string, match func(uint8, []byte) bool) ([]SearchHit, error) {
	c, err := s.e.backends.Acquire(backend.WithOwner(ctx, s.connID), ds, false)
	if err != nil {
		return nil, err
	}
	r, err := c.Exec(sql)
	c.Release()
	if err != nil {
		return nil, err
	}
	if r == nil || r.Resultset == nil || len(r.Fields) != 7 {
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] a fresh-window read of %s did not return its seven columns", ds)
	}
	if err := decodeRows(r); err != nil {
		return nil, err
	}
	var out []SearchHit
	for i := range r.Values {
		var h SearchHit
		var errs [6]error
		h.MsgID, errs[0] = r.GetUint(i, 0)
		h.ConvID, errs[1] = r.GetUint(i, 1)
		h.Seq, errs[2] = r.GetUint(i, 2)
		h.SenderUID, errs[3] = r.GetUint(i, 3)
		mt, e4 := r.GetUint(i, 4)
		errs[4] = e4
		body, e5 := r.GetString(i, 5)
		errs[5] = e5
		for _, e := range errs {
			if e != nil {
				return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] a fresh-window row: %v", e)
			}
		}
		ts, err := r.GetString(i, 6)
		if err != nil {
			return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] a fresh-window row: %v", err)
		}
		if h.CreatedMs, err = parseDatetimeMs(ts); err != nil {
			return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] a fresh-window created_at %q: %v", ts, err)
		}
		h.MsgType = uint8(mt)
		if match(h.MsgType, []byte(body)) {
			out = append(out, h)
		}
	}
	return out, nil
}

// mergeSearchHits merges hit lists into result order (created_at, then
// msg_id, both descending), one row per message (the first list's wins),
// at most limit.
func mergeSearchHits(limit int, asc bool, lists ...[]SearchHit) []SearchHit {
	seen := map[uint64]bool{}
	var out []SearchHit
	for _, l := range lists {
		for _, h := range l {
			if !seen[h.MsgID] {
				seen[h.MsgID] = true
				out = append(out, h)
			}
		}
	}
	slices.SortFunc(out, func(a, b SearchHit) int {
		if a.CreatedMs != b.CreatedMs {
			if a.CreatedMs > b.CreatedMs {
				return -1
			}
			return 1
		}
		switch {
		case a.MsgID > b.MsgID:
			return -1
		case a.MsgID < b.MsgID:
			return 1
		}
		return 0
	})
	if asc {
		slices.Reverse(out)
	}
	return out[:min(len(out), limit)]
}

// searchResult encodes the hits as the rows MariaDB would send for the
// same columns of conv_msg (text or binary protocol).
func searchResult(fields []*mysql.Field, cols []string, hits []SearchHit, binary bool) (*mysql.Result, error) {
	rs := &mysql.Resultset{Fields: fields, RowDatas: make([]mysql.RowData, 0, len(hits))}
	for _, h := range hits {
		e := histcache.Entry{Seq: h.Seq, MsgID: h.MsgID, SenderUID: h.SenderUID, MsgType: h.MsgType, CreatedMs: h.CreatedMs}
		row, ok := encodeHistoryRow(nil, fields, cols, h.ConvID, e, binary)
		if !ok {
			return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] msg_search: a hit of message %d has no row encoding", h.MsgID)
		}
		rs.RowDatas = append(rs.RowDatas, row)
	}
	return &mysql.Result{Resultset: rs, AffectedRows: uint64(len(hits))}, nil
}
