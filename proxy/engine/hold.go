package engine

import (
	"context"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/shardgate"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// The migration hold's engine side (docs/design.md §5, step 6): every
// write is admitted by the proxy's shard gates (package shardgate) before
// it is routed, and a transaction that wrote a shard keeps counting there
// through its connection (txnConn) until it ends.

// allShards is what DDL admits: it writes every physical table.
var allShards = func() []router.Shard {
	out := make([]router.Shard, router.NumShards)
	for i := range out {
		out[i] = router.Shard(i)
	}
	return out
}()

// writeShards returns the shards a sharded write will send statements to,
// computed before any route is read: routing must happen after a held
// shard is released, under the routes then served. nil: nothing to admit
// (not a write, or a statement the routing step refuses anyway, which it
// then does with its own message).
func (s *Session) writeShards(pl *plan, args []any) []router.Shard {
	a := pl.A
	var vals []rewrite.Value
	switch a.Kind {
	case rewrite.KindDDL:
		return allShards
	case rewrite.KindInsert:
		vals = a.InsertRows // no MaxInList here: an INSERT has no such bound
	case rewrite.KindUpdate, rewrite.KindDelete, rewrite.KindSelect: // the select: a locking read in a transaction
		if !a.HasKey || len(a.Keys) > s.e.opt.MaxInList {
			return nil
		}
		vals = a.Keys
	default:
		return nil
	}
	if len(vals) == 1 {
		// The common write: no allocation on its path.
		k, err := keyOf(vals[0], args)
		if err != nil {
			return nil
		}
		s.oneShard[0] = router.ShardOf(k)
		return s.oneShard[:]
	}
	shards, err := shardsOfValues(vals, args)
	if err != nil {
		return nil
	}
	return shards
}

// admitWrite waits until the shards pl writes are not held, and counts the
// statement on them. The returned shards are given back by endWrite.
func (s *Session) admitWrite(pl *plan, args []any) ([]router.Shard, error) {
	return s.admitShards(s.writeShards(pl, args))
}

// admitShards is admitWrite for a write on shards.
func (s *Session) admitShards(shards []router.Shard) ([]router.Shard, error) {
	if len(shards) == 0 {
		return nil, nil
	}
	if _, ok := s.txn.conn.(*txnConn); ok && len(shards) == 1 && int(shards[0]) == s.txn.pin {
		// The transaction already counts on its shard: it is never queued.
		return nil, nil
	}
	if err := s.e.gate.Admit(shards, s.interrupt); err != nil {
		return nil, err
	}
	return shards, nil
}

// endWrite ends a write admitted on shards. A transaction that wrote its
// shard keeps counting there until it ends: its connection becomes a
// txnConn.
func (s *Session) endWrite(shards []router.Shard) {
	if len(shards) == 0 {
		return
	}
	if len(shards) == 1 && s.txn.conn != nil && s.txn.pin == int(shards[0]) {
		if _, ok := s.txn.conn.(*txnConn); !ok {
			s.txn.conn = s.e.registerTxn(shards[0], s.txn.conn)
			return
		}
	}
	s.e.gate.Leave(shards)
}

// Hold holds shard's writes: see shardgate.Gates.Hold (coord's
// LockFollower calls it through cmd/convoy).
func (e *Engine) Hold(ctx context.Context, shard int) (*shardgate.ShardHold, error) {
	return e.gate.Hold(ctx, shard)
}

// Fence refuses every sharded write: see shardgate.Gates.Fence.
func (e *Engine) Fence(ctx context.Context, err error) (*shardgate.WriteFence, int) {
	return e.gate.Fence(ctx, err)
}

// registerTxn turns a transaction's connection into one the hold can fail;
// the transaction keeps the count its first write took until it ends.
func (e *Engine) registerTxn(sh router.Shard, c Conn) *txnConn {
	return &txnConn{Conn: c, ds: c.Datasource(), t: e.gate.Register(sh, func() {
		_, _ = c.Exec("ROLLBACK")
		c.Release()
	})}
}

// txnConn is the backend connection of a transaction that wrote a shard:
// every call goes through its shardgate.Txn, through which a hold past its
// deadline fails the transaction.
type txnConn struct {
	Conn
	ds string
	t  *shardgate.Txn
}

func (t *txnConn) Datasource() string { return t.ds }

func (t *txnConn) Exec(sql string) (*mysql.Result, error) {
	if err := t.t.Enter(); err != nil {
		return nil, err
	}
	defer t.t.Exit()
	return t.Conn.Exec(sql)
}

func (t *txnConn) ExecMulti(sql string) ([]*mysql.Result, error) {
	if err := t.t.Enter(); err != nil {
		return nil, err
	}
	defer t.t.Exit()
	return t.Conn.ExecMulti(sql)
}

func (t *txnConn) ExecPrepared(sql string, args []any) (*mysql.Result, error) {
	if err := t.t.Enter(); err != nil {
		return nil, err
	}
	defer t.t.Exit()
	return t.Conn.ExecPrepared(sql, args)
}

func (t *txnConn) Describe(sql string) (int, []*mysql.Field, error) {
	if err := t.t.Enter(); err != nil {
		return 0, nil, err
	}
	defer t.t.Exit()
	return t.Conn.Describe(sql)
}

func (t *txnConn) UseDB(db string) error {
	if err := t.t.Enter(); err != nil {
		return err
	}
	defer t.t.Exit()
	return t.Conn.UseDB(db)
}

func (t *txnConn) SyncVars(want map[string]string) error {
	if err := t.t.Enter(); err != nil {
		return err
	}
	defer t.t.Exit()
	return t.Conn.SyncVars(want)
}

// Release ends the transaction's count on its shard.
func (t *txnConn) Release() { t.t.End(t.Conn.Release) }
