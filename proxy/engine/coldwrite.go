package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

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
//   - any other UPDATE / DELETE of a conversation with archived rows is
//     refused (1235): Convoy cannot tell which archived rows its WHERE
//     would match.
//
// A young message is warm: a recall or delete finds its rows in MySQL (one
// locking read of the keys) and never looks into the archive.

// coldWriteCheck refuses, before it runs, an UPDATE / DELETE that is not
// by key of a conversation with archived rows, and reports whether a keyed
// one must go through coldWrite.
func (s *Session) coldWriteCheck(pl *plan, args []any) (keyed bool, err error) {
	if s.e.cold == nil || pl.cold == nil || pl.cold.write == nil {
		return false, nil
	}
	w := pl.cold.write
	if w.Keyed {
		conv, err := keyOf(w.ConvID[0], args)
		return err == nil && s.e.cold.tier.Archived(router.ShardOf(conv)), nil
	}
	for _, v := range w.ConvID {
		conv, err := keyOf(v, args)
		if err != nil {
			return false, nil // the statement fails on its key as before
		}
		if !s.e.cold.tier.Archived(router.ShardOf(conv)) {
			continue
		}
		rg, err := s.archivedRange(conv)
		if err != nil {
			s.e.metrics.coldWrite("unavailable")
			return false, errorf(CodeBackendUnavailable, "the archived range of conversation %d could not be read to check this %s (%v); nothing was changed, retry", conv, pl.a.Kind, classify(err))
		}
		if rg.has {
			s.e.metrics.coldWrite("refused")
			return false, errorf(CodeNotSupported, "%s on %s of conversation %d could reach its archived messages (seq %d..%d, cold tier): archived messages are deleted only by key (conv_id = ? AND seq = ? / IN (...), or msg_id = ? / IN (...)) and never updated; nothing was changed",
				pl.a.Kind, w.Table, conv, rg.lo, rg.hi)
		}
	}
	return false, nil
}

// coldWrite runs a keyed UPDATE / DELETE p of an archived shard: in its own
// transaction (or the client's), it locks the warm rows the statement
// names, looks the others up in the archive, and then refuses (UPDATE) or
// runs the statement and tombstones the archived ones (DELETE).
func (s *Session) coldWrite(pl *plan, p part, args []any, binary bool) (*mysql.Result, error) {
	w := pl.cold.write
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
	db := quoteIdent(phys.Database)
	archived, err := s.archivedKeys(c, db, quoteIdent(phys.Table), w.Table, conv, seqs, ids)
	if err != nil {
		s.afterError(c, err)
		s.e.metrics.coldWrite("unavailable")
		return nil, err
	}
	if len(archived) > 0 && !w.Delete {
		s.e.metrics.coldWrite("refused")
		return nil, errorf(CodeArchivedReadOnly, "Table '%s' is read only for archived messages: seq %s of conversation %d are archived (cold tier) and cannot be updated through Convoy; nothing was changed",
			w.Table, joinUints(seqsOf(archived)), conv)
	}
	start = time.Now()
	r, err := s.exec(c, p, binary)
	s.e.observe(p.shard, c.Datasource(), true, start, err)
	if err == nil && len(archived) > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "INSERT IGNORE INTO %s.%s (conv_id, tbl, seq, msg_id, deleted_at) VALUES ", db, quoteIdent(ColdTombstoneTable))
		for i, k := range archived {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "(%d,'%s',%d,%d,UTC_TIMESTAMP(3))", conv, w.Table, k[0], k[1])
		}
		if _, err = c.Exec(b.String()); err == nil {
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
	hist := s.e.routes.Current().Physical(historyTable, router.ShardOf(conv))
	lk := &coldLookup{c: c, db: db, table: quoteIdent(hist.Table), release: func() {}}
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
		keyCol, db, quoteIdent(ColdTombstoneTable), conv, logical, keyCol, joinUints(missing)))
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
	ctx, cancel := context.WithTimeout(context.Background(), s.e.cold.writeTimeout)
	defer cancel()
	ctx, killed := s.interruptible(ctx)
	var page ColdPage
	if keyCol == "seq" {
		page, err = s.e.cold.tier.ByKeys(ctx, conv, missing, nil, files, nil)
	} else {
		page, err = s.e.cold.tier.ByKeys(ctx, conv, nil, missing, files, nil)
	}
	if killed() {
		return nil, errorf(CodeQueryInterrupted, "Query execution was interrupted: KILL while the archive (cold tier) of conversation %d was checked; nothing was changed", conv)
	}
	if err == nil && page.More {
		err = fmt.Errorf("the archive did not answer within %s", s.e.cold.writeTimeout)
	}
	if err != nil {
		return nil, errorf(CodeBackendUnavailable, "the archive (cold tier) of conversation %d could not be checked for the rows this statement names (%v); nothing was changed, retry", conv, err)
	}
	var out [][2]uint64
	for _, row := range page.Rows {
		if logical != historyTable && row.Content == nil {
			continue // the message had no body row to delete or update
		}
		out = append(out, [2]uint64{row.Seq, row.MsgID})
	}
	return out, nil
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
