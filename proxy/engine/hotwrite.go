package engine

import (
	"context"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/convoy-im/convoy/histcache"
	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/proxy/planbuilder"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// historyConvs lists the conversations a conv_msg write touches; known=false
// when the statement does not say (no key: only an admin "all" runs those).
func historyConvs(pl *plan, args []any) (convs []uint64, known bool) {
	vals := pl.A.Keys
	if pl.A.Kind == rewrite.KindInsert {
		vals = pl.A.InsertRows
	} else if !pl.A.HasKey {
		return nil, false
	}
	seen := map[uint64]bool{}
	for _, v := range vals {
		k, err := keyOf(v, args)
		if err != nil {
			return nil, false
		}
		if !seen[k] {
			seen[k] = true
			convs = append(convs, k)
		}
	}
	return convs, true
}

// histWrite is one write's pending-write markers on the hot tier.
type histWrite struct {
	tier  HotTier
	convs []uint64
	toks  []histcache.WriteToken
}

// beginHistWrite sets the markers; call it before the write becomes visible
// (the autocommit statement, or COMMIT). A failed BeginWrite still yields a
// token: end then invalidates, as the tier's contract asks.
func (e *Engine) beginHistWrite(convs []uint64) *histWrite {
	if e.hot == nil || len(convs) == 0 {
		return nil
	}
	w := &histWrite{tier: e.hot.tier, convs: convs}
	for _, c := range convs {
		tok, _ := w.tier.BeginWrite(context.Background(), c)
		w.toks = append(w.toks, tok)
	}
	return w
}

// end finishes the write: committed rows of known conversations are written
// through; everything else (updates, deletes, unknown rows, any error, even
// one that may hide a successful commit) drops the conversation.
func (w *histWrite) end(err error, entries map[uint64][]histcache.Entry) {
	if w == nil {
		return
	}
	ctx := context.Background()
	for i, c := range w.convs {
		if es, ok := entries[c]; ok && err == nil {
			_ = w.tier.EndWrite(ctx, c, w.toks[i], es)
			continue
		}
		_ = w.tier.Invalidate(ctx, c)
		_ = w.tier.AbortWrite(ctx, c, w.toks[i])
	}
}

// invalidateAllHistory drops the whole hot tier after writes to conv_msg the
// proxy cannot attribute to conversations (DDL, admin "all" / shard=N /
// datasource= writes).
func (e *Engine) invalidateAllHistory() {
	if e.hot == nil {
		return
	}
	if err := e.hot.tier.InvalidateAll(context.Background()); err != nil {
		e.log.Warn("invalidating the history hot tier failed; this proxy bypasses the tier until a reset of the whole tier succeeds", zap.Error(err))
	}
}

// readBackHistory reads the rows an INSERT just wrote (same connection, same
// transaction, before COMMIT) so they can be written through to the tier
// exactly as MySQL stores them (created_at included, even from NOW()).
func (s *Session) readBackHistory(c Conn, snap *router.Snapshot, rows []int, conv []uint64, seqs []uint64) (map[uint64][]histcache.Entry, error) {
	byConv := map[uint64][]string{}
	var order []uint64
	for k, i := range rows {
		if byConv[conv[i]] == nil {
			order = append(order, conv[i])
		}
		byConv[conv[i]] = append(byConv[conv[i]], fmt.Sprint(seqs[k]))
	}
	out := map[uint64][]histcache.Entry{}
	for _, id := range order {
		p := snap.Physical(planbuilder.HistoryTable, router.ShardOf(id))
		r, err := c.Exec(fmt.Sprintf("SELECT seq, msg_id, sender_uid, msg_type, created_at FROM %s.%s WHERE conv_id = %d AND seq IN (%s) ORDER BY seq",
			sqlq.Ident(p.Database), sqlq.Ident(p.Table), id, strings.Join(byConv[id], ",")))
		if err != nil {
			return nil, err
		}
		es, err := historyEntries(r)
		if err != nil {
			return nil, nil // not representable in the tier: the write invalidates instead
		}
		out[id] = es
	}
	return out, nil
}
