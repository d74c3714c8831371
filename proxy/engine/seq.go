package engine

import (
	"fmt"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/histcache"
	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/proxy/planbuilder"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// insertWithSeq runs an INSERT into conv_msg that omits seq: each row gets
// the next seq of its conversation from im_conv_seq on the same shard, in
// the same local transaction, so concurrent writers of one conversation
// queue on its im_conv_seq row and never share a seq. The client receives
// the first row's seq as the statement's last-insert-id.
func (s *Session) insertWithSeq(pl *plan, args []any, binary bool) (*mysql.Result, error) {
	if r, ok, err := s.seqBatch(pl, args); ok {
		return r, err
	}
	a := pl.A
	snap := s.e.routes.Current()
	type group struct {
		shard router.Shard
		t     router.Target
		rows  []int
	}
	var groups []*group
	byTarget := map[router.Target]*group{}
	conv := make([]uint64, len(a.InsertRows))
	for i, v := range a.InsertRows {
		k, err := keyOf(v, args)
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", i+1, err)
		}
		conv[i] = k
		sh := router.ShardOf(k)
		t := snap.Target(sh)
		g, ok := byTarget[t]
		if !ok {
			g = &group{shard: sh, t: t}
			byTarget[t] = g
			groups = append(groups, g)
		}
		g.rows = append(g.rows, i)
	}
	if len(groups) > 1 && s.inTxn() {
		return nil, sqlerr.Errorf(sqlerr.CrossShardTxn, "this INSERT has rows for several shards; inside a transaction all rows must belong to the transaction's shard (no distributed transactions)")
	}
	var firstSeq uint64
	jobs := make([]job, len(groups))
	for gi, g := range groups {
		g := g
		jobs[gi] = job{shard: g.shard, ds: g.t.Datasource, rows: g.rows, run: func(c Conn) (*mysql.Result, error) {
			seqs, err := s.allocateSeqs(c, snap, g.rows, conv)
			if err != nil {
				return nil, err
			}
			tmpl, params, err := rewrite.SeqInsert(a, g.rows, seqs, binary)
			if err != nil {
				return nil, err
			}
			p := part{shard: g.shard, ds: g.t.Datasource, sql: renderTemplate(s, tmpl, snap, g.shard)}
			if binary {
				k := 0
				for _, i := range params {
					if i == rewrite.SeqParam {
						p.args = append(p.args, seqs[k])
						k++
					} else {
						p.args = append(p.args, args[i])
					}
				}
			}
			r, err := s.exec(c, p, binary)
			if err != nil {
				return nil, err
			}
			if g.rows[0] == 0 {
				firstSeq = seqs[0]
			}
			if s.seqs != nil {
				for k, i := range g.rows {
					s.seqs[i] = seqs[k]
				}
			}
			if s.e.hot != nil && !s.inTxn() {
				es, err := s.readBackHistory(c, snap, g.rows, conv, seqs)
				if err != nil {
					return nil, err
				}
				for id, e := range es {
					if s.histEntries == nil {
						s.histEntries = map[uint64][]histcache.Entry{}
					}
					s.histEntries[id] = e
				}
			}
			return r, nil
		}}
	}
	var r *mysql.Result
	var err error
	if s.inTxn() {
		j := jobs[0]
		start := time.Now()
		c, release, cerr := s.conn(int(j.shard), j.ds)
		if cerr != nil {
			s.e.observeRefused(j.shard, j.ds, true, start, cerr)
			return nil, cerr
		}
		r, err = j.run(c)
		s.afterError(c, err)
		release()
	} else {
		r, err = s.writeJobs(jobs)
	}
	if err != nil {
		return nil, err
	}
	r.InsertId = firstSeq
	fixFields(r, s.db) // RETURNING rows of the one-shard path
	return r, nil
}

// allocateSeqs reserves, per conversation, as many seqs as the rows need,
// with one statement per conversation: LAST_INSERT_ID(expr) makes the server
// report the new max_seq in the OK packet, and the row lock it takes holds
// until the caller's transaction ends.
func (s *Session) allocateSeqs(c Conn, snap *router.Snapshot, rows []int, conv []uint64) ([]uint64, error) {
	need := map[uint64]uint64{}
	var order []uint64
	for _, i := range rows {
		if need[conv[i]] == 0 {
			order = append(order, conv[i])
		}
		need[conv[i]]++
	}
	next := map[uint64]uint64{}
	for _, id := range order {
		n := need[id]
		p := snap.Physical("im_conv_seq", router.ShardOf(id))
		r, err := c.Exec(fmt.Sprintf("INSERT INTO %s.%s (conv_id, max_seq) VALUES (%d, LAST_INSERT_ID(%d)) ON DUPLICATE KEY UPDATE max_seq = LAST_INSERT_ID(max_seq + %d)",
			sqlq.Ident(p.Database), sqlq.Ident(p.Table), id, n, n))
		if err != nil {
			return nil, err
		}
		top, err := allocatedSeq(c, r, n)
		if err != nil {
			return nil, err
		}
		if top < n {
			return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] seq allocation for conversation %d returned %d", id, top)
		}
		next[id] = top - n + 1
	}
	seqs := make([]uint64, len(rows))
	for k, i := range rows {
		seqs[k] = next[conv[i]]
		next[conv[i]]++
	}
	return seqs, nil
}

// allocatedSeq is the new max_seq of a seq allocation that reserved n
// seqs: the OK packet's insert id, which LAST_INSERT_ID(expr) sets. On a
// table with a trigger (a DBA's audit trigger, say) MariaDB reports 0
// there while the session's LAST_INSERT_ID() is right, so a value below n
// is asked for again on the same connection (still the same session, the
// value survives the COMMIT): one more round trip, never a wrong seq or a
// stored message reported as failed.
func allocatedSeq(c Conn, r *mysql.Result, n uint64) (uint64, error) {
	if r.InsertId >= n {
		return r.InsertId, nil
	}
	res, err := c.Exec("SELECT LAST_INSERT_ID()")
	if err != nil {
		return 0, err
	}
	if err := decodeRows(res); err != nil {
		return 0, err
	}
	if res.Resultset == nil || len(res.Values) != 1 || len(res.Values[0]) != 1 {
		return 0, sqlerr.Errorf(sqlerr.Internal, "[BUG] SELECT LAST_INSERT_ID() did not return one value")
	}
	return res.GetUint(0, 0)
}

// seqBatch is insertWithSeq for the common case, every row for one
// conversation (a client sending a message): the seq allocation, the
// INSERT, the read-back for the hot tier and the COMMIT reach the backend
// as one batch (Conn.ExecMulti). A send costs one round trip instead of
// five, and the conversation's im_conv_seq row lock is held for the
// server's work only, not across round trips: a busy group chat's senders
// queue for microseconds, not milliseconds. The INSERT reads its seqs from
// the im_conv_seq row the batch just raised (the transaction holds its
// lock), so nothing travels back and forth. ok=false: the statement does
// not fit (several conversations, a bound value without an exact literal)
// and the caller takes the general path.
func (s *Session) seqBatch(pl *plan, args []any) (_ *mysql.Result, ok bool, _ error) {
	a := pl.A
	if a.Returning != "" {
		return nil, false, nil // its rows: see insertWithSeq
	}
	var conv uint64
	for i, v := range a.InsertRows {
		k, err := keyOf(v, args)
		if err != nil || (i > 0 && k != conv) {
			return nil, false, nil
		}
		conv = k
	}
	if pl.seqHoles == nil {
		t, err := rewrite.SeqInsertHoles(a)
		if err != nil {
			return nil, false, nil
		}
		pl.seqHoles = t
	}
	snap := s.e.routes.Current()
	sh := router.ShardOf(conv)
	seqTable := snap.Physical("im_conv_seq", sh)
	seqRow := fmt.Sprintf("(SELECT `max_seq` FROM %s.%s WHERE `conv_id` = %d)", sqlq.Ident(seqTable.Database), sqlq.Ident(seqTable.Table), conv)
	n := len(a.InsertRows)
	vals := make([]any, len(args), len(args)+n)
	copy(vals, pl.inlineArgs(args, s.utf8Client()))
	for i := 0; i < n; i++ {
		vals = append(vals, rewrite.Literal{Raw: fmt.Sprintf("%s - %d", seqRow, n-1-i)})
	}
	insert, inlined := pl.seqHoles.RenderInline(nil, func(logical string) (string, string) {
		p := snap.Physical(logical, sh)
		return p.Database, p.Table
	}, vals)
	if !inlined {
		return nil, false, nil
	}
	inTxn := s.inTxn()
	readBack := s.e.hot != nil && !inTxn
	var b strings.Builder
	if !inTxn {
		b.WriteString("BEGIN;")
	}
	fmt.Fprintf(&b, "INSERT INTO %s.%s (conv_id, max_seq) VALUES (%d, LAST_INSERT_ID(%d)) ON DUPLICATE KEY UPDATE max_seq = LAST_INSERT_ID(max_seq + %d);",
		sqlq.Ident(seqTable.Database), sqlq.Ident(seqTable.Table), conv, n, n)
	b.Write(insert)
	if readBack {
		msgs := snap.Physical(planbuilder.HistoryTable, sh)
		fmt.Fprintf(&b, ";SELECT seq, msg_id, sender_uid, msg_type, created_at FROM %s.%s WHERE conv_id = %d AND seq > %s - %d ORDER BY seq",
			sqlq.Ident(msgs.Database), sqlq.Ident(msgs.Table), conv, seqRow, n)
	}
	if !inTxn {
		b.WriteString(";COMMIT")
	}
	// A mirrored shard's commit is noted in the same round trip
	// (noteCommit).
	_, noteGTID := s.commits[sh]
	noteGTID = noteGTID && !inTxn
	if noteGTID {
		b.WriteString(";SELECT @@last_gtid")
	}
	start := time.Now()
	c, release, err := s.conn(int(sh), snap.Target(sh).Datasource)
	if err != nil {
		s.e.observeRefused(sh, snap.Target(sh).Datasource, true, start, err)
		return nil, true, err
	}
	defer release()
	start = time.Now()
	rs, err := c.ExecMulti(b.String())
	if err != nil && !inTxn && backend.IsFenceSetUp(err) {
		// The batch stopped inside its own transaction (MDEV-26048, see
		// backend.IsFenceSetUp): roll it back and send it again, once.
		_, _ = c.Exec("ROLLBACK")
		rs, err = c.ExecMulti(b.String())
	}
	first := 0
	if !inTxn {
		first = 1 // BEGIN's OK
	}
	want := first + 2
	if readBack {
		want++
	}
	if !inTxn {
		want++ // COMMIT's OK
	}
	if err != nil && !inTxn && len(rs) >= want {
		// COMMIT answered OK and only what follows it failed (the
		// trailing COM_SET_OPTION's reply, the GTID's read): the message
		// is stored (the connection is dropped). An error here would make
		// the client send it again.
		err = nil
	}
	if noteGTID && len(rs) > want {
		if g := rs[want]; decodeRows(g) == nil && g.Resultset != nil && len(g.Values) == 1 && len(g.Values[0]) == 1 {
			if v, gerr := g.GetString(0, 0); gerr == nil {
				s.commits[sh] = v
			}
		}
		rs = rs[:want]
	}
	s.e.observe(sh, c.Datasource(), true, start, err)
	s.afterError(c, err)
	if err != nil {
		if !inTxn && len(rs) > 0 && backend.IsServerError(err) {
			// The batch stopped inside its own transaction on a connection
			// that is still in step; a broken one is closed, which rolls back.
			_, _ = c.Exec("ROLLBACK")
		}
		return nil, true, err
	}
	if len(rs) != want {
		return nil, true, sqlerr.Errorf(sqlerr.Internal, "[BUG] seq batch for conversation %d returned %d results", conv, len(rs))
	}
	top, err := allocatedSeq(c, rs[first], uint64(n))
	if err != nil || top < uint64(n) {
		if inTxn {
			return nil, true, sqlerr.Errorf(sqlerr.Internal, "the seq allocated for conversation %d could not be read back (%v); roll the transaction back", conv, err)
		}
		// Committed, but what seq it got is unknown: the client must not
		// take it for a failed send and send it again blindly.
		return nil, true, sqlerr.Errorf(sqlerr.Internal, "the message for conversation %d is stored but its seq could not be read back (%v); do not resend it: read the conversation's latest page", conv, err)
	}
	rs[first].InsertId = top
	if readBack {
		if es, err := historyEntries(rs[first+2]); err == nil {
			if s.histEntries == nil {
				s.histEntries = map[uint64][]histcache.Entry{}
			}
			s.histEntries[conv] = es
		} // else: not representable in the tier; the write invalidates instead
	}
	r := rs[first+1]
	r.InsertId = rs[first].InsertId - uint64(n) + 1
	if s.seqs != nil {
		for i := range n {
			s.seqs[i] = r.InsertId + uint64(i)
		}
	}
	return r, true, nil
}
