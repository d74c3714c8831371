package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/histcache"
	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/proxy/mysqlrow"
	"github.com/convoy-im/convoy/proxy/planbuilder"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// HotTier is the Redis history cache of docs/design.md §4 (histcache.Cache).
// Any error or ok=false is a miss: the statement goes to MySQL as if the tier
// did not exist. The call order that keeps a served page exact is the tier's
// contract (see package histcache): BeginWrite before the commit, EndWrite /
// Invalidate + AbortWrite after it; BeginFill before the MySQL read a Fill
// installs.
type HotTier interface {
	Before(ctx context.Context, convID, before uint64, limit int) ([]histcache.Entry, bool, error)
	After(ctx context.Context, convID, after uint64, limit int) ([]histcache.Entry, bool, error)
	ByMsgID(ctx context.Context, convID, msgID uint64) (e histcache.Entry, found, ok bool, err error)
	BeginFill(ctx context.Context, convID uint64) (histcache.FillToken, error)
	Fill(ctx context.Context, convID uint64, tok histcache.FillToken, entries []histcache.Entry, lo, hi uint64) (bool, error)
	BeginWrite(ctx context.Context, convID uint64) (histcache.WriteToken, error)
	EndWrite(ctx context.Context, convID uint64, tok histcache.WriteToken, committed []histcache.Entry) error
	AbortWrite(ctx context.Context, convID uint64, tok histcache.WriteToken) error
	Invalidate(ctx context.Context, convID uint64) error
	InvalidateAll(ctx context.Context) error
}

// hotState is the engine side of the hot tier.
type hotState struct {
	tier     HotTier
	fillRows int           // newest rows one fill reads (the tier keeps this many)
	fields   sync.Map      // column list + protocol -> []*mysql.Field seen from MySQL
	fillSem  chan struct{} // bounds concurrent background fills
	lastFill sync.Map      // conv -> time.Time of the last fill attempt
}

// SetHotTier enables the hot tier; fillRows is how many of the newest rows a
// fill reads (the tier's MaxEntries). Call before serving.
func (e *Engine) SetHotTier(t HotTier, fillRows int) {
	if fillRows <= 0 {
		fillRows = 500
	}
	e.hot = &hotState{tier: t, fillRows: fillRows, fillSem: make(chan struct{}, 4)}
}

// fieldsKey names a history result shape: metadata names the session's
// database, so that is part of the key. Plans may be shared between sessions
// (the plan cache), so nothing is cached on the plan: the column part is
// printed once when the plan is built and the rest is a concatenation.
func (s *Session) fieldsKey(pl *plan, bin bool) string {
	proto := "/text/"
	if bin {
		proto = "/binary/"
	}
	return pl.HistCols + proto + s.db
}

// hotRead serves a recognised history read from the tier. ok=false: go to
// MySQL (and fill afterwards).
func (s *Session) hotRead(pl *plan, args []any, bin bool) (*mysql.Result, bool) {
	h := pl.Hist
	conv, err := keyOf(h.ConvID, args)
	if err != nil {
		return nil, false
	}
	cursor, err := keyOf(h.Cursor, args)
	if err != nil {
		return nil, false
	}
	f, ok := s.e.hot.fields.Load(s.fieldsKey(pl, bin))
	if !ok {
		return nil, false // first sight of this shape: learn MySQL's metadata first
	}
	fields := f.([]*mysql.Field)
	ctx := context.Background() // the tier bounds every call itself
	var entries []histcache.Entry
	switch h.Dir {
	case rewrite.HistoryAnchor:
		e, found, ok, _ := s.e.hot.tier.ByMsgID(ctx, conv, cursor)
		if !ok {
			return nil, false
		}
		if found {
			entries = []histcache.Entry{e}
		}
	default:
		limit, err := keyOf(h.Limit, args)
		if err != nil || limit == 0 || limit > uint64(s.e.hot.fillRows) {
			return nil, false
		}
		if h.Dir == rewrite.HistoryBefore {
			entries, ok, _ = s.e.hot.tier.Before(ctx, conv, cursor, int(limit))
		} else {
			entries, ok, _ = s.e.hot.tier.After(ctx, conv, cursor, int(limit))
		}
		if !ok {
			return nil, false
		}
	}
	rs := &mysql.Resultset{Fields: fields, RowDatas: make([]mysql.RowData, 0, len(entries))}
	buf := make([]byte, 0, 64*len(entries)) // one allocation for the page's rows
	for _, e := range entries {
		start := len(buf)
		if buf, ok = encodeHistoryRow(buf, fields, h.Columns, conv, e, bin); !ok {
			return nil, false
		}
		rs.RowDatas = append(rs.RowDatas, buf[start:len(buf):len(buf)])
	}
	return &mysql.Result{Resultset: rs, AffectedRows: uint64(len(entries))}, true
}

// afterHistoryMiss learns the result metadata of a history shape and fills
// the conversation in the background.
func (s *Session) afterHistoryMiss(pl *plan, args []any, bin bool, r *mysql.Result) {
	h := pl.Hist
	if r != nil && r.Resultset != nil && len(r.Fields) == len(h.Columns) {
		key := s.fieldsKey(pl, bin)
		if _, seen := s.e.hot.fields.Load(key); !seen && historyFieldsEncodable(r.Fields) {
			fs := make([]*mysql.Field, len(r.Fields))
			for i, f := range r.Fields {
				c := *f
				c.Data = c.Dump() // encoded once; every hit reuses the bytes
				fs[i] = &c
			}
			s.e.hot.fields.Store(key, fs)
		}
	}
	if conv, err := keyOf(h.ConvID, args); err == nil {
		s.e.fillAsync(conv)
	}
}

func historyFieldsEncodable(fs []*mysql.Field) bool {
	for _, f := range fs {
		switch f.Type {
		case mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_TINY:
			if f.Flag&mysql.UNSIGNED_FLAG == 0 {
				return false
			}
		case mysql.MYSQL_TYPE_DATETIME:
		default:
			return false
		}
	}
	return true
}

// fillAsync installs the newest rows of a conversation, at most once a
// second per conversation and a few at a time; a busy proxy skips fills
// rather than queueing them.
func (e *Engine) fillAsync(conv uint64) {
	if last, ok := e.hot.lastFill.Load(conv); ok && time.Since(last.(time.Time)) < time.Second {
		return
	}
	select {
	case e.hot.fillSem <- struct{}{}:
	default:
		return
	}
	e.hot.lastFill.Store(conv, time.Now())
	go func() {
		defer func() { <-e.hot.fillSem }()
		if err := e.fill(conv); err != nil {
			e.log.Debug("history fill skipped")
		}
	}()
}

// fill reads the newest fillRows rows of conv from MySQL and hands them to
// the tier, which installs them only if nothing was written meanwhile.
func (e *Engine) fill(conv uint64) error {
	ctx := context.Background()
	tok, err := e.hot.tier.BeginFill(ctx, conv)
	if err != nil {
		return err
	}
	p := e.routes.Current().Physical(planbuilder.HistoryTable, router.ShardOf(conv))
	c, err := e.acquire(p.Datasource)
	if err != nil {
		return err
	}
	r, err := c.Exec(fmt.Sprintf("SELECT seq, msg_id, sender_uid, msg_type, created_at FROM %s.%s WHERE conv_id = %d ORDER BY seq DESC LIMIT %d",
		sqlq.Ident(p.Database), sqlq.Ident(p.Table), conv, e.hot.fillRows))
	c.Release()
	if err != nil {
		return err
	}
	entries, err := historyEntries(r)
	if err != nil {
		return err
	}
	var lo uint64
	if len(entries) == e.hot.fillRows {
		lo = entries[len(entries)-1].Seq
	}
	if sh := router.ShardOf(conv); e.cold != nil && e.cold.tier.Archived(sh) {
		// Archived rows are not in MySQL: the coverage must start above
		// every one of them, or a page below would be served without
		// them. The range is read after the rows, so it counts every row
		// the read missed (histcache/doc.go, "The cold tier").
		lk, err := e.coldLookup(sh)
		if err != nil {
			return err
		}
		rg, err := lk.ranges(conv)
		lk.release()
		if err != nil {
			return err
		}
		if rg.has && lo <= rg.hi {
			if rg.hi == ^uint64(0) {
				return nil // nothing can be covered above it
			}
			lo = rg.hi + 1
			for len(entries) > 0 && entries[len(entries)-1].Seq < lo {
				entries = entries[:len(entries)-1]
			}
		}
	}
	_, err = e.hot.tier.Fill(ctx, conv, tok, entries, lo, histcache.NoUpperBound)
	return err
}

// historyEntries decodes rows of (seq, msg_id, sender_uid, msg_type,
// created_at) read with the text protocol.
func historyEntries(r *mysql.Result) ([]histcache.Entry, error) {
	if r == nil || r.Resultset == nil || len(r.Fields) != 5 {
		// A fill runs in the background: a malformed answer is a skipped
		// fill, never a panic of the process.
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] a history fill read did not return its five columns")
	}
	if err := decodeRows(r); err != nil {
		return nil, err
	}
	out := make([]histcache.Entry, 0, len(r.Values))
	for i := range r.Values {
		var e histcache.Entry
		var err error
		u := func(col int) uint64 {
			if err != nil {
				return 0
			}
			var v uint64
			v, err = r.GetUint(i, col)
			return v
		}
		e.Seq, e.MsgID, e.SenderUID = u(0), u(1), u(2)
		mt := u(3)
		if err != nil || mt > 255 {
			return nil, fmt.Errorf("history row %d: %v", i, err)
		}
		e.MsgType = uint8(mt)
		ts, err := r.GetString(i, 4)
		if err != nil {
			return nil, err
		}
		if e.CreatedMs, err = parseDatetimeMs(ts); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// DATETIME has no time zone: it is read and written as UTC wall-clock text,
// so text -> ms -> text is exact.
func parseDatetimeMs(s string) (int64, error) {
	if len(s) < 19 {
		return 0, fmt.Errorf("datetime %q", s)
	}
	t, err := time.Parse("2006-01-02 15:04:05", s[:19])
	if err != nil {
		return 0, err
	}
	ms := t.UnixMilli()
	if len(s) > 19 {
		frac := s[20:]
		if s[19] != '.' || len(frac) == 0 {
			return 0, fmt.Errorf("datetime %q", s)
		}
		for len(frac) < 3 {
			frac += "0"
		}
		if strings.Trim(frac[3:], "0") != "" {
			return 0, fmt.Errorf("datetime %q has sub-millisecond digits the hot tier cannot hold", s)
		}
		n, err := strconv.Atoi(frac[:3])
		if err != nil {
			return 0, err
		}
		ms += int64(n)
	}
	return ms, nil
}

// appendPadded appends v (>= 0) in decimal, zero-padded to width digits.
func appendPadded(dst []byte, v, width int) []byte {
	var b [8]byte
	for i := width - 1; i >= 0; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return append(dst, b[:width]...)
}

// encodeHistoryRow encodes one cached entry exactly as MariaDB sends the row
// (text or binary protocol) for the given result fields.
func encodeHistoryRow(dst []byte, fields []*mysql.Field, cols []string, conv uint64, e histcache.Entry, bin bool) ([]byte, bool) {
	if bin {
		dst = append(dst, 0)
		dst = append(dst, make([]byte, (len(fields)+7+2)>>3)...) // no NULLs
	}
	for i, f := range fields {
		var u uint64
		switch cols[i] {
		case "conv_id":
			u = conv
		case "seq":
			u = e.Seq
		case "msg_id":
			u = e.MsgID
		case "sender_uid":
			u = e.SenderUID
		case "msg_type":
			u = uint64(e.MsgType)
		case "created_at":
			var ok bool
			if dst, ok = appendDatetime(dst, f, e.CreatedMs, bin); !ok {
				return nil, false
			}
			continue
		default:
			return nil, false
		}
		if !bin {
			var digits [20]byte
			d := strconv.AppendUint(digits[:0], u, 10)
			dst = append(append(dst, byte(len(d))), d...) // length < 251: one byte
			continue
		}
		switch f.Type {
		case mysql.MYSQL_TYPE_LONGLONG:
			dst = binary.LittleEndian.AppendUint64(dst, u)
		case mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_INT24:
			dst = binary.LittleEndian.AppendUint32(dst, uint32(u))
		case mysql.MYSQL_TYPE_SHORT:
			dst = binary.LittleEndian.AppendUint16(dst, uint16(u))
		case mysql.MYSQL_TYPE_TINY:
			dst = append(dst, byte(u))
		default:
			return nil, false
		}
	}
	return dst, true
}

func appendDatetime(dst []byte, f *mysql.Field, ms int64, bin bool) ([]byte, bool) {
	if f.Type != mysql.MYSQL_TYPE_DATETIME {
		return nil, false
	}
	t := time.UnixMilli(ms).UTC()
	dec := int(f.Decimal)
	if dec > 6 {
		return nil, false
	}
	micro := int64(t.Nanosecond() / 1000)
	// Digits below the column's precision would have been rounded away
	// by MySQL; a value that needs them cannot have come from this column.
	if scale := int64(1); dec < 6 {
		for k := dec; k < 6; k++ {
			scale *= 10
		}
		if micro%scale != 0 {
			return nil, false
		}
	}
	if !bin {
		// "YYYY-MM-DD HH:MM:SS[.f{dec}]", as MariaDB prints the column.
		y, mo, d := t.Date()
		h, mi, sec := t.Clock()
		if y < 0 || y > 9999 {
			return nil, false
		}
		n := 19
		if dec > 0 {
			n += 1 + dec
		}
		dst = append(dst, byte(n))
		dst = append(appendPadded(dst, y, 4), '-')
		dst = append(appendPadded(dst, int(mo), 2), '-')
		dst = append(appendPadded(dst, d, 2), ' ')
		dst = append(appendPadded(dst, h, 2), ':')
		dst = append(appendPadded(dst, mi, 2), ':')
		dst = appendPadded(dst, sec, 2)
		if dec > 0 {
			frac := int(micro)
			for k := dec; k < 6; k++ {
				frac /= 10
			}
			dst = appendPadded(append(dst, '.'), frac, dec)
		}
		return dst, true
	}
	return mysqlrow.AppendBinaryDatetime(dst, t.Year(), int(t.Month()), t.Day(), t.Hour(), t.Minute(), t.Second(), int(micro)), true
}
