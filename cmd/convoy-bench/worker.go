package main

import (
	"context"
	"database/sql"
	"fmt"
)

// The statements of the workload, on the logical tables.
const (
	sqlSendConvoy   = "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 1, NOW(3))"
	sqlSendExplicit = "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, ?, 1, NOW(3))"
	sqlSendContent  = "INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, ?, 1, ?, NOW(3))"
	sqlMaxSeq       = "SELECT MAX(seq) FROM conv_msg WHERE conv_id = ?"
	sqlFirst        = "SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT 20"
	sqlCatchup      = "SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND seq > ? ORDER BY seq ASC LIMIT 50"
	sqlJump         = "SELECT seq, msg_id, created_at FROM conv_msg WHERE conv_id = ? AND msg_id = ?"
	sqlInbox        = "SELECT conv_id, seq, msg_id FROM im_inbox WHERE uid = ? ORDER BY conv_id, seq DESC LIMIT 50"
	sqlConvlist     = "SELECT conv_id, last_read_seq, mute FROM im_conv_member WHERE uid = ? ORDER BY updated_at DESC LIMIT 50"
	sqlPoint        = "SELECT msg_id FROM conv_msg WHERE conv_id = ? AND seq = ?"
)

// firstCursor makes "seq < ?" the newest page.
const firstCursor = uint64(1) << 62

type stmtID int

const (
	stSend stmtID = iota
	stContent
	stMaxSeq
	stFirst
	stCatchup
	stJump
	stInbox
	stConvlist
	stPoint
	numStmts
)

// worker owns one client connection; in prepared mode its statements are
// prepared once on that connection.
type worker struct {
	d       *dataset
	o       *options
	conn    *sql.Conn
	pick    func() opKind
	p       *picker
	sql     [numStmts]string
	stmts   [numStmts]*sql.Stmt
	hists   [numOps]hist
	payload []byte
	phys    map[string]*sql.Conn // --physical: one connection per datasource
	// physStmts: --physical in prepared mode, one statement per physical
	// statement text (per table), prepared on first use, as a sharding
	// client library would.
	physStmts map[string]*sql.Stmt
}

func newWorker(ctx context.Context, db *sql.DB, d *dataset, mix []int, o *options, idx int) (*worker, error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	w := &worker{d: d, o: o, conn: c, p: newPicker(d, idx)}
	if o.phys != nil {
		if w.phys, err = o.phys.conns(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	w.sql = [numStmts]string{
		stSend: sqlSendConvoy, stContent: sqlSendContent, stMaxSeq: sqlMaxSeq,
		stFirst: sqlFirst, stCatchup: sqlCatchup, stJump: sqlJump,
		stInbox: sqlInbox, stConvlist: sqlConvlist, stPoint: sqlPoint,
	}
	if o.explicitSeq {
		w.sql[stSend] = sqlSendExplicit
	}
	// Cumulative weights for the op draw.
	var cum []int
	var kinds []opKind
	total := 0
	for i, wt := range mix {
		if wt > 0 {
			total += wt
			cum = append(cum, total)
			kinds = append(kinds, opKind(i))
		}
	}
	w.pick = func() opKind {
		x := w.p.r.IntN(total)
		for i, c := range cum {
			if x < c {
				return kinds[i]
			}
		}
		return kinds[len(kinds)-1]
	}
	w.payload = make([]byte, 256)
	for i := range w.payload {
		w.payload[i] = byte(w.p.r.Uint32())
	}
	if o.mode == "prepared" {
		need := map[stmtID]bool{}
		for i, wt := range mix {
			if wt == 0 {
				continue
			}
			for _, s := range stmtsOf(opKind(i), o.explicitSeq) {
				need[s] = true
			}
		}
		for s := range need {
			st, err := c.PrepareContext(ctx, w.sql[s])
			if err != nil {
				w.close()
				return nil, fmt.Errorf("PREPARE %s: %w", w.sql[s], err)
			}
			w.stmts[s] = st
		}
	}
	return w, nil
}

func stmtsOf(op opKind, explicit bool) []stmtID {
	switch op {
	case opSend:
		if explicit {
			return []stmtID{stSend, stContent, stMaxSeq}
		}
		return []stmtID{stSend, stContent}
	case opFirst, opScroll:
		return []stmtID{stFirst}
	case opCatchup:
		return []stmtID{stCatchup}
	case opJump:
		return []stmtID{stJump}
	case opInbox:
		return []stmtID{stInbox}
	case opConvlist:
		return []stmtID{stConvlist}
	case opPoint:
		return []stmtID{stPoint}
	}
	return nil
}

func (w *worker) close() {
	for _, s := range w.stmts {
		if s != nil {
			s.Close()
		}
	}
	w.conn.Close()
	for _, st := range w.physStmts {
		st.Close()
	}
	for _, c := range w.phys {
		c.Close()
	}
}

func (w *worker) exec(ctx context.Context, s stmtID, args ...any) (sql.Result, error) {
	if st := w.stmts[s]; st != nil {
		return st.ExecContext(ctx, args...)
	}
	return w.conn.ExecContext(ctx, w.sql[s], args...)
}

// physStmt returns the statement q prepared on the worker's connection to ds.
func (w *worker) physStmt(ctx context.Context, q, ds string) (*sql.Stmt, error) {
	if st, ok := w.physStmts[q]; ok {
		return st, nil
	}
	st, err := w.phys[ds].PrepareContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("PREPARE %s: %w", q, err)
	}
	if w.physStmts == nil {
		w.physStmts = map[string]*sql.Stmt{}
	}
	w.physStmts[q] = st
	return st, nil
}

// query runs a read and consumes every row; it returns the row count.
func (w *worker) query(ctx context.Context, s stmtID, args ...any) (int, error) {
	var rows *sql.Rows
	var err error
	switch st := w.stmts[s]; {
	case w.phys != nil:
		q, ds := w.o.phys.route(w.sql[s], args[0].(uint64))
		if w.o.mode != "prepared" {
			rows, err = w.phys[ds].QueryContext(ctx, q, args...)
			break
		}
		var pst *sql.Stmt
		if pst, err = w.physStmt(ctx, q, ds); err == nil {
			rows, err = pst.QueryContext(ctx, args...)
		}
	case st != nil:
		rows, err = st.QueryContext(ctx, args...)
	default:
		rows, err = w.conn.QueryContext(ctx, w.sql[s], args...)
	}
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	dest := make([]any, len(cols))
	raw := make([]sql.RawBytes, len(cols))
	for i := range dest {
		dest[i] = &raw[i]
	}
	n := 0
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

func (w *worker) do(ctx context.Context, op opKind) error {
	r := w.p.r
	switch op {
	case opSend:
		return w.send(ctx)
	case opFirst:
		_, err := w.query(ctx, stFirst, w.p.conv(), firstCursor)
		return err
	case opScroll:
		conv := w.p.conv()
		top := w.d.newestSeq(conv)
		cur := top + 1 - uint64(20*(1+r.IntN(5)))
		if cur < 2 || cur > top+1 {
			cur = 2
		}
		_, err := w.query(ctx, stFirst, conv, cur)
		return err
	case opCatchup:
		conv := w.p.conv()
		top := w.d.newestSeq(conv)
		back := uint64(1 + r.IntN(100))
		after := uint64(0)
		if top > back {
			after = top - back
		}
		_, err := w.query(ctx, stCatchup, conv, after)
		return err
	case opJump:
		conv := w.p.conv()
		seq := 1 + r.Uint64N(w.d.msgCount(conv))
		_, err := w.query(ctx, stJump, conv, preparedMsgID(conv, seq))
		return err
	case opInbox:
		_, err := w.query(ctx, stInbox, w.p.user())
		return err
	case opConvlist:
		_, err := w.query(ctx, stConvlist, w.p.user())
		return err
	case opPoint:
		conv := w.p.conv()
		n, err := w.query(ctx, stPoint, conv, 1+r.Uint64N(w.d.msgCount(conv)))
		if err == nil && n != 1 {
			return fmt.Errorf("point select returned %d rows, want 1 (data not prepared?)", n)
		}
		return err
	}
	return fmt.Errorf("unknown op %d", op)
}

func (w *worker) send(ctx context.Context) error {
	conv := w.p.conv()
	msgID := w.d.newMsgID()
	sender := w.d.uid(int(conv - w.o.convBase))
	if w.o.explicitSeq {
		seq, err := w.nextSeq(ctx, conv)
		if err != nil {
			return err
		}
		if _, err := w.exec(ctx, stSend, conv, seq, msgID, sender); err != nil {
			return err
		}
		w.d.sawSeq(conv, seq)
	} else {
		res, err := w.exec(ctx, stSend, conv, msgID, sender)
		if err != nil {
			return err
		}
		if seq, err := res.LastInsertId(); err == nil && seq > 0 {
			w.d.sawSeq(conv, uint64(seq))
		}
	}
	n := 40 + w.p.r.IntN(len(w.payload)-40)
	_, err := w.exec(ctx, stContent, msgID, conv, sender, w.payload[:n])
	return err
}

// nextSeq allocates the next seq of conv in this process, seeded from
// MAX(seq) the first time (for servers that do not allocate seqs).
func (w *worker) nextSeq(ctx context.Context, conv uint64) (uint64, error) {
	v, _ := w.d.seqs.LoadOrStore(conv, &seqCounter{})
	c := v.(*seqCounter)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.seeded {
		var maxSeq sql.NullInt64
		var err error
		if st := w.stmts[stMaxSeq]; st != nil {
			err = st.QueryRowContext(ctx, conv).Scan(&maxSeq)
		} else {
			err = w.conn.QueryRowContext(ctx, sqlMaxSeq, conv).Scan(&maxSeq)
		}
		if err != nil {
			return 0, fmt.Errorf("seeding seq: %w", err)
		}
		c.next = uint64(maxSeq.Int64) + 1
		c.seeded = true
	}
	s := c.next
	c.next++
	return s, nil
}
