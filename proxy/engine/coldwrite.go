package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/proxy/planbuilder"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// Writes that name archived rows. Once the archiver has deleted a
// message's warm rows, an UPDATE or DELETE through MySQL alone would match
// nothing and the message would go on showing from the archive. So on a
// shard with archived files:
//
//   - a DELETE by key (conv_id = ? AND seq = / IN, or msg_id = / IN) that
//     names archived rows records a tombstone for each, in the shard's
//     database and in the statement's transaction: the delete and the
//     tombstones commit together, and cold reads skip tombstoned rows from
//     then on; the affected-row count includes them;
//   - an UPDATE by key that names archived rows is refused before it runs
//     (1036, "read only": archived messages are immutable), nothing changed;
//   - a DELETE of one conversation's rows by range ("clear chat": WHERE
//     conv_id = ? with optional seq / msg_id comparisons and sender_uid =
//     ?, rewrite.ArchiveErase) erases the archived rows it reaches in the
//     statement's transaction (coldErase): a seq range as one row of
//     ColdErasureTable, rows named by sender or msg_id as tombstones;
//   - any other UPDATE / DELETE of a conversation with archived rows is
//     refused (1235): Convoy cannot tell which archived rows its WHERE
//     would match.
//
// A young message is warm: a recall or delete finds its rows in MySQL (one
// locking read of the keys) and never looks into the archive.

// coldWriteMode is how an UPDATE / DELETE meets the archive.
type coldWriteMode int

const (
	coldWarm  coldWriteMode = iota // cannot name archived rows: MySQL alone
	coldKeyed                      // by key: coldWrite
	coldErase                      // a DELETE of a conversation's rows: coldErase
)

// coldWriteCheck refuses, before it runs, an UPDATE / DELETE that is not
// by key of a conversation with archived rows, unless it is a DELETE the
// archive can apply (rewrite.ArchiveErase), and says how it must run.
func (s *Session) coldWriteCheck(pl *plan, args []any) (coldWriteMode, error) {
	if s.e.cold == nil || pl.Cold == nil || pl.Cold.Write == nil {
		return coldWarm, nil
	}
	w := pl.Cold.Write
	if w.Keyed {
		conv, err := keyOf(w.ConvID[0], args)
		if err == nil && s.e.cold.tier.Archived(router.ShardOf(conv)) {
			return coldKeyed, nil
		}
		return coldWarm, nil
	}
	for _, v := range w.ConvID {
		conv, err := keyOf(v, args)
		if err != nil {
			return coldWarm, nil // the statement fails on its key as before
		}
		if !s.e.cold.tier.Archived(router.ShardOf(conv)) {
			continue
		}
		rg, err := s.archivedRange(conv)
		if err != nil {
			s.e.metrics.coldWrite("unavailable")
			return coldWarm, sqlerr.Errorf(sqlerr.BackendUnavailable, "the archived range of conversation %d could not be read to check this %s (%v); nothing was changed, retry", conv, pl.A.Kind, classify(err))
		}
		if !rg.has {
			continue
		}
		if w.Erase != nil {
			if _, err := resolveErase(w.Erase, args); err == nil {
				return coldErase, nil
			}
		}
		s.e.metrics.coldWrite("refused")
		return coldWarm, sqlerr.Errorf(sqlerr.NotSupported, "%s on %s of conversation %d could reach its archived messages (seq %d..%d, cold tier): archived messages are deleted by key (conv_id = ? AND seq = ? / IN (...), or msg_id = ? / IN (...)), by conversation (conv_id = ? with optional seq / msg_id ranges and sender_uid = ?) and never updated; nothing was changed",
			pl.A.Kind, w.Table, conv, rg.lo, rg.hi)
	}
	return coldWarm, nil
}

// coldWrite runs a keyed UPDATE / DELETE p of an archived shard: in its own
// transaction (or the client's), it locks the warm rows the statement
// names, looks the others up in the archive, and then refuses (UPDATE) or
// runs the statement and tombstones the archived ones (DELETE).
func (s *Session) coldWrite(pl *plan, p part, args []any, binary bool) (*mysql.Result, error) {
	w := pl.Cold.Write
	conv, _ := keyOf(w.ConvID[0], args)
	seqs, err := keyValues(w.Seqs, args)
	if err != nil {
		return s.single(p, true, binary)
	}
	ids, err := keyValues(w.MsgIDs, args)
	if err != nil {
		return s.single(p, true, binary)
	}
	start := time.Now()
	c, release, err := s.conn(int(p.shard), p.ds)
	if err != nil {
		s.e.observeRefused(p.shard, p.ds, true, start, err)
		return nil, err
	}
	defer release()
	own := !s.inTxn()
	if own {
		if _, err := c.Exec("BEGIN"); err != nil {
			return nil, err
		}
	}
	done := false
	defer func() {
		if own && !done {
			_, _ = c.Exec("ROLLBACK")
		}
	}()
	snap := s.e.routes.Current()
	phys := snap.Physical(w.Table, p.shard)
	db := sqlq.Ident(phys.Database)
	archived, err := s.archivedKeys(c, db, sqlq.Ident(phys.Table), w.Table, conv, seqs, ids)
	if err != nil {
		s.afterError(c, err)
		s.e.metrics.coldWrite("unavailable")
		return nil, err
	}
	if len(archived) > 0 && !w.Delete {
		s.e.metrics.coldWrite("refused")
		return nil, sqlerr.Errorf(sqlerr.ArchivedReadOnly, "Table '%s' is read only for archived messages: seq %s of conversation %d are archived (cold tier) and cannot be updated through Convoy; nothing was changed",
			w.Table, joinUints(seqsOf(archived)), conv)
	}
	start = time.Now()
	r, err := s.exec(c, p, binary)
	s.e.observe(p.shard, c.Datasource(), true, start, err)
	if err == nil && len(archived) > 0 {
		if err = insertTombstones(c, db, conv, w.Table, archived); err == nil {
			r.AffectedRows += uint64(len(archived))
		}
	}
	if err == nil && own {
		_, err = c.Exec("COMMIT")
		if done = err == nil; done {
			s.noteCommit(c, p.shard)
		}
	}
	s.afterError(c, err)
	if err != nil {
		return nil, err
	}
	if len(archived) > 0 {
		s.e.metrics.coldWrite("tombstoned")
	} else {
		s.e.metrics.coldWrite("warm")
	}
	fixFields(r, s.db)
	return r, nil
}

// archivedKeys returns the (seq, msg_id) of the rows a keyed write names
// that only the archive holds: not warm (their warm rows, if any, are
// locked by this transaction now), not tombstoned, and archived. Seqs
// outside the conversation's archived range, and every key when its warm
// row exists, never reach the archive.
func (s *Session) archivedKeys(c Conn, db, table, logical string, conv uint64, seqs, ids []uint64) ([][2]uint64, error) {
	keyCol, keys := "msg_id", ids
	if len(seqs) > 0 {
		keyCol, keys = "seq", seqs
	}
	r, err := c.Exec(fmt.Sprintf("SELECT %s FROM %s.%s WHERE conv_id = %d AND %s IN (%s) FOR UPDATE", keyCol, db, table, conv, keyCol, joinUints(keys)))
	if err != nil {
		return nil, err
	}
	if err := decodeRows(r); err != nil {
		return nil, err
	}
	var missing []uint64
	for _, k := range keys {
		if !slices.ContainsFunc(r.Values, func(v []mysql.FieldValue) bool { u, _ := fieldUint(v[0]); return u == k }) {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	// The range read on this transaction's connection: after the locking
	// read, so it counts every warm row that read found gone.
	hist := s.e.routes.Current().Physical(planbuilder.HistoryTable, router.ShardOf(conv))
	lk := &coldLookup{c: c, db: db, table: sqlq.Ident(hist.Table), release: func() {}, lock: true}
	rg, err := lk.ranges(conv)
	if err != nil {
		return nil, err
	}
	if keyCol == "seq" {
		missing = slices.DeleteFunc(missing, func(seq uint64) bool { return !rg.has || seq < rg.lo || seq > rg.hi })
	}
	if !rg.has || len(missing) == 0 {
		return nil, nil
	}
	// The files that may serve them (read bounds), then the tombstones:
	// rows this table already has tombstones for are deleted, nothing to
	// do for them (a conv_msg tombstone leaves the body row, which a
	// msg_content delete tombstones in turn).
	var files []ColdFile
	if keyCol == "seq" {
		files, err = lk.files(conv, slices.Min(missing), slices.Max(missing), nil)
	} else {
		files, err = lk.files(conv, 0, 0, missing)
	}
	if err != nil {
		return nil, err
	}
	r, err = c.Exec(fmt.Sprintf("SELECT %s FROM %s.%s WHERE conv_id = %d AND tbl = '%s' AND %s IN (%s)",
		keyCol, db, sqlq.Ident(ColdTombstoneTable), conv, logical, keyCol, joinUints(missing)))
	if err != nil {
		return nil, err
	}
	if err := decodeRows(r); err != nil {
		return nil, err
	}
	for _, v := range r.Values {
		k, _ := fieldUint(v[0])
		missing = slices.DeleteFunc(missing, func(x uint64) bool { return x == k })
	}
	if len(missing) == 0 {
		return nil, nil
	}
	erased, err := lk.erasures(conv, logical)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.e.cold.writeTimeout)
	defer cancel()
	ctx, killed := s.interruptible(ctx)
	var page ColdPage
	if keyCol == "seq" {
		page, err = s.e.cold.tier.ByKeys(ctx, conv, missing, nil, files, ColdSkip{Erased: erased})
	} else {
		page, err = s.e.cold.tier.ByKeys(ctx, conv, nil, missing, files, ColdSkip{Erased: erased})
	}
	if killed() {
		return nil, sqlerr.Errorf(sqlerr.QueryInterrupted, "Query execution was interrupted: KILL while the archive (cold tier) of conversation %d was checked; nothing was changed", conv)
	}
	if err == nil && page.More {
		err = fmt.Errorf("the archive did not answer within %s", s.e.cold.writeTimeout)
	}
	if err != nil {
		return nil, sqlerr.Errorf(sqlerr.BackendUnavailable, "the archive (cold tier) of conversation %d could not be checked for the rows this statement names (%v); nothing was changed, retry", conv, err)
	}
	var out [][2]uint64
	for _, row := range page.Rows {
		if logical != planbuilder.HistoryTable && row.Content == nil {
			continue // the message had no body row to delete or update
		}
		out = append(out, [2]uint64{row.Seq, row.MsgID})
	}
	return out, nil
}

// insertTombstones records the archived rows keys ((seq, msg_id) pairs)
// of conv's table tbl as deleted, in c's transaction, 500 a statement.
func insertTombstones(c Conn, db string, conv uint64, tbl string, keys [][2]uint64) error {
	for len(keys) > 0 {
		batch := keys[:min(len(keys), 500)]
		keys = keys[len(batch):]
		var b strings.Builder
		fmt.Fprintf(&b, "INSERT IGNORE INTO %s.%s (conv_id, tbl, seq, msg_id, deleted_at) VALUES ", db, sqlq.Ident(ColdTombstoneTable))
		for i, k := range batch {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "(%d,'%s',%d,%d,UTC_TIMESTAMP(3))", conv, tbl, k[0], k[1])
		}
		if _, err := c.Exec(b.String()); err != nil {
			return err
		}
	}
	return nil
}

func seqsOf(keys [][2]uint64) []uint64 {
	out := make([]uint64, len(keys))
	for i, k := range keys {
		out[i] = k[0]
	}
	return out
}

// keyValues resolves a keyed write's seqs or msg_ids.
func keyValues(vals []rewrite.Value, args []any) ([]uint64, error) {
	out := make([]uint64, 0, len(vals))
	for _, v := range vals {
		k, err := keyOf(v, args)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}

// eraseSpec is an ArchiveErase with its values: the seqs and msg_ids it
// reaches (inclusive) and the sender it is restricted to.
type eraseSpec struct {
	seqLo, seqHi uint64
	idLo, idHi   uint64
	sender       *uint64
}

// filtered: the DELETE names rows by more than a seq range, so the
// archived rows it reaches are found one by one (tombstones), not erased
// as a range.
func (sp eraseSpec) filtered() bool {
	return sp.sender != nil || sp.idLo > 0 || sp.idHi < math.MaxUint64
}

func (sp eraseSpec) matches(k ColdKey) bool {
	return k.Seq >= sp.seqLo && k.Seq <= sp.seqHi && k.MsgID >= sp.idLo && k.MsgID <= sp.idHi &&
		(sp.sender == nil || *sp.sender == k.Sender)
}

// resolveErase reads an ArchiveErase's values; an error when one is not
// an unsigned integer (the statement is then refused as any other DELETE
// that could reach archived rows).
func resolveErase(e *rewrite.ArchiveErase, args []any) (eraseSpec, error) {
	sp := eraseSpec{seqHi: math.MaxUint64, idHi: math.MaxUint64}
	if e.Sender != nil {
		u, err := keyOf(*e.Sender, args)
		if err != nil {
			return sp, err
		}
		sp.sender = &u
	}
	for _, b := range e.Bounds {
		v, err := keyOf(b.V, args)
		if err != nil {
			return sp, err
		}
		lo, hi := &sp.seqLo, &sp.seqHi
		if b.Column == "msg_id" {
			lo, hi = &sp.idLo, &sp.idHi
		}
		switch b.Op {
		case "=":
			*lo, *hi = max(*lo, v), min(*hi, v)
		case "<":
			if v == 0 {
				*lo, *hi = 1, 0
			} else {
				*hi = min(*hi, v-1)
			}
		case "<=":
			*hi = min(*hi, v)
		case ">":
			if v == math.MaxUint64 {
				*lo, *hi = 1, 0
			} else {
				*lo = max(*lo, v+1)
			}
		case ">=":
			*lo = max(*lo, v)
		}
	}
	return sp, nil
}

// coldErase runs a DELETE of one conversation's rows (rewrite.ArchiveErase:
// clear chat, a range of its history, a member's messages) on a shard
// with archived rows: the statement deletes the warm rows, and in the same
// transaction the archived rows it reaches are erased, a seq range as one
// row of ColdErasureTable, rows named by sender or msg_id as tombstones.
// The affected-row count includes the archived rows (Keys reads them);
// when the archive cannot count a range in time the range is erased all
// the same and a warning says the count leaves them out. A DELETE that
// must name archived rows one by one fails, changing nothing, when the
// archive does not answer.
func (s *Session) coldErase(pl *plan, p part, args []any, binary bool) (*mysql.Result, error) {
	w := pl.Cold.Write
	conv, _ := keyOf(w.ConvID[0], args)
	spec, err := resolveErase(w.Erase, args)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	c, release, err := s.conn(int(p.shard), p.ds)
	if err != nil {
		s.e.observeRefused(p.shard, p.ds, true, start, err)
		return nil, err
	}
	defer release()
	// The statement is atomic: in the client's transaction a savepoint
	// takes back the warm rows' delete when the archived part fails.
	own := !s.inTxn()
	begin, undo := "SAVEPOINT convoy_erase", "ROLLBACK TO SAVEPOINT convoy_erase"
	if own {
		begin, undo = "BEGIN", "ROLLBACK"
	}
	if _, err := c.Exec(begin); err != nil {
		s.afterError(c, err)
		return nil, err
	}
	start = time.Now()
	r, err := s.exec(c, p, binary)
	s.e.observe(p.shard, c.Datasource(), true, start, err)
	var n uint64
	var warn *Warning
	if err == nil {
		// After the DELETE: it locked the warm rows, so a delete chunk of
		// the archiver cannot move one of them to the archive unseen.
		n, warn, err = s.eraseArchived(c, conv, w.Table, spec)
	}
	if err == nil && own {
		_, err = c.Exec("COMMIT")
		if err == nil {
			s.noteCommit(c, p.shard)
		}
	}
	if err != nil {
		_, _ = c.Exec(undo)
		s.afterError(c, err)
		return nil, err
	}
	r.AffectedRows += n
	if warn != nil {
		s.warn(*warn)
	}
	s.e.metrics.coldWrite("erased")
	fixFields(r, s.db)
	return r, nil
}

// eraseArchived erases conv's archived rows of table tbl that spec
// reaches, on c inside the statement's transaction, and returns how many.
func (s *Session) eraseArchived(c Conn, conv uint64, tbl string, spec eraseSpec) (uint64, *Warning, error) {
	hist := s.e.routes.Current().Physical(planbuilder.HistoryTable, router.ShardOf(conv))
	db := sqlq.Ident(hist.Database)
	lk := &coldLookup{c: c, db: db, table: sqlq.Ident(hist.Table), release: func() {}, lock: true}
	rg, err := lk.ranges(conv)
	if err != nil {
		return 0, nil, err
	}
	lo, hi := max(spec.seqLo, rg.lo), min(spec.seqHi, rg.hi)
	if !rg.has || lo > hi {
		return 0, nil, nil
	}
	files, err := lk.files(conv, lo, hi, nil)
	if err != nil {
		return 0, nil, err
	}
	tomb, err := lk.tombstones(conv, tbl, lo, hi, nil)
	if err != nil {
		return 0, nil, err
	}
	erased, err := lk.erasures(conv, tbl)
	if err != nil {
		return 0, nil, err
	}
	skip := ColdSkip{Seqs: make([]uint64, len(tomb)), Erased: erased}
	for i, t := range tomb {
		skip.Seqs[i] = t[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.e.cold.writeTimeout)
	defer cancel()
	ctx, killed := s.interruptible(ctx)
	keys, kerr := s.e.cold.tier.Keys(ctx, conv, lo, hi, files, skip)
	if killed() {
		return 0, nil, sqlerr.Errorf(sqlerr.QueryInterrupted, "Query execution was interrupted: KILL while the archive (cold tier) of conversation %d was read", conv)
	}
	keys = slices.DeleteFunc(keys, func(k ColdKey) bool { return !spec.matches(k) || tbl != planbuilder.HistoryTable && !k.Body })
	if spec.filtered() {
		if kerr != nil {
			s.e.metrics.coldWrite("unavailable")
			return 0, nil, sqlerr.Errorf(sqlerr.BackendUnavailable, "the archive (cold tier) of conversation %d could not be read for the rows this DELETE names (%v); nothing was changed, retry", conv, kerr)
		}
		named := make([][2]uint64, len(keys))
		for i, k := range keys {
			named[i] = [2]uint64{k.Seq, k.MsgID}
		}
		if err := insertTombstones(c, db, conv, tbl, named); err != nil {
			return 0, nil, err
		}
		return uint64(len(named)), nil, nil
	}
	if _, err := c.Exec(fmt.Sprintf("INSERT IGNORE INTO %s.%s (conv_id, tbl, min_seq, max_seq, requested_at) VALUES (%d, '%s', %d, %d, UTC_TIMESTAMP(3))",
		db, sqlq.Ident(ColdErasureTable), conv, tbl, lo, hi)); err != nil {
		return 0, nil, err
	}
	if kerr != nil {
		s.e.log.Warn("cold tier: an erased range of archived rows could not be counted", zap.Uint64("conv", conv), zap.Error(kerr))
		return 0, &Warning{Level: "Warning", Code: ColdWarningCode, Message: fmt.Sprintf(
			"The affected-row count leaves out archived rows (cold tier) of conversation %d: seq %d..%d are erased, but the archive did not count them (%v)", conv, lo, hi, kerr)}, nil
	}
	return uint64(len(keys)), nil, nil
}
