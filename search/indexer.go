package search

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/router"
)

// The index feed of one datasource: its binlog's committed msg_content and
// conv_msg rows, applied to the Engine in batches with the binlog position
// after them as the checkpoint (Engine.Apply records both), so a restart
// from the checkpoint replays at most the last batch, which upserts and
// soft deletes by msg_id make harmless: no gap, no duplicate.
//
// What a row change means:
//   - msg_content insert or update: the message's text (Extraction); its
//     seq comes from the conv_msg row of the same transaction, or is read
//     from the shard's conv_msg when the two were written apart. An update
//     that leaves no text (msg_type changed to a type not indexed: a
//     recall; the body emptied) soft-deletes the message; an insert
//     without text is skipped and counted.
//   - conv_msg insert without its msg_content in the transaction: the body
//     is read from the shard's msg_content (it was written first, or is
//     written later and indexed then).
//   - conv_msg update to a msg_type not indexed: a recall, soft delete.
//   - a delete of either row: soft delete.
//
// A row counts only where its shard lives now (router snapshot): a
// migration's copy into a target that is not live yet, and the purge of
// the old side after a switch, are not messages sent or deleted.

// IndexerConfig is one datasource's feed.
type IndexerConfig struct {
	// Source is the datasource name (the checkpoint's key).
	Source string
	// DB reads the rows a transaction did not carry (the other table).
	DB *sql.DB
	// Binlog is the datasource's replication account; ServerID must be
	// unique among the server's replicas. Filter is set by the indexer.
	Binlog  binlog.Config
	Engine  Engine
	Routes  func() *router.Snapshot
	Extract Extraction
	Metrics *Metrics
	Log     *zap.Logger
	// Archived, when the cold tier is on, calls fn with every message of
	// a shard that only the archive holds (archive.Catalog.Messages) up to
	// the files' read bounds, which the backfill reads in its snapshot:
	// the backfill indexes them too, or a rebuilt index would cover the
	// warm window only. Nil: no cold tier.
	Archived ArchivedFunc
	// MaxBatch bounds the documents of one Apply (default 2000); Flush the
	// time a document waits for a fuller batch (default 200ms).
	MaxBatch int
	Flush    time.Duration
}

// ReadBounds are a database's cold read bounds (router.ColdFilesTable):
// per cold file, per conversation, the last seq the file may serve.
type ReadBounds = map[string]map[uint64]uint64

// ArchivedFunc calls fn with the messages of shard only the cold tier
// holds, within bounds.
type ArchivedFunc func(ctx context.Context, shard int, bounds ReadBounds, fn func(ArchivedMessage) error) error

// ArchivedMessage is a message only the cold tier holds (see
// IndexerConfig.Archived).
type ArchivedMessage struct {
	ConvID, Seq, MsgID, SenderUID uint64
	MsgType                       uint8
	CreatedAt                     string // as MySQL prints DATETIME(3)
	Body                          []byte // nil: no msg_content row
}

// Indexer runs one datasource's feed.
type Indexer struct {
	cfg IndexerConfig
	log *zap.Logger
}

// NewIndexer checks cfg.
func NewIndexer(cfg IndexerConfig) (*Indexer, error) {
	if cfg.Source == "" || cfg.DB == nil || cfg.Engine == nil || cfg.Routes == nil {
		return nil, errors.New("search: IndexerConfig needs Source, DB, Engine and Routes")
	}
	if err := cfg.Extract.Check(); err != nil {
		return nil, err
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 2000
	}
	if cfg.Flush <= 0 {
		cfg.Flush = 200 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	cfg.Binlog.Filter = func(_, table string) bool {
		_, ok := logicalOf(table)
		return ok || table == router.ArchiveProgressTable || table == router.ColdTombstoneTable || table == router.ColdErasureTable
	}
	cfg.Binlog.Log = cfg.Log
	return &Indexer{cfg: cfg, log: cfg.Log.With(zap.String("datasource", cfg.Source))}, nil
}

// checkpointOf is how a binlog position is stored as a datasource's
// checkpoint: with the analysis version that indexed up to it.
func checkpointOf(pos string) string { return fmt.Sprintf("a%d:%s", AnalysisVersion, pos) }

// positionOf reads a checkpoint; current is false when there is none or
// another analysis version wrote it (a checkpoint of version 1 had no
// prefix).
func positionOf(cp string) (pos string, current bool) {
	if pos, current = strings.CutPrefix(cp, fmt.Sprintf("a%d:", AnalysisVersion)); !current {
		return "", false
	}
	return pos, true
}

// logicalOf maps conv_msg_0441 / msg_content_0441 to its logical table.
func logicalOf(table string) (string, bool) {
	i := strings.LastIndexByte(table, '_')
	if i < 0 || len(table)-i-1 != 4 || strings.Trim(table[i+1:], "0123456789") != "" {
		return "", false
	}
	switch l := table[:i]; l {
	case "conv_msg", "msg_content":
		return l, true
	}
	return "", false
}

// Run follows the binlog from the engine's checkpoint until ctx ends or a
// failure retrying cannot help. With no checkpoint, or one written under
// another AnalysisVersion, it first indexes the rows already stored, from
// a consistent snapshot whose binlog position the stream then starts from.
func (ix *Indexer) Run(ctx context.Context) error {
	cp, err := ix.cfg.Engine.Checkpoint(ctx, ix.cfg.Source)
	if err != nil {
		return err
	}
	pos, current := positionOf(cp)
	if !current {
		if cp != "" {
			ix.log.Info("search index made by another analysis version: indexing again from a snapshot",
				zap.String("checkpoint", cp), zap.Int("analysis_version", AnalysisVersion))
		}
		if pos, err = ix.backfill(ctx); err != nil {
			return err
		}
	}
	from, err := binlog.ParsePosition(pos)
	if err != nil {
		return fmt.Errorf("search: checkpoint of %s: %w", ix.cfg.Source, err)
	}
	reader, err := binlog.NewReader(ix.cfg.Binlog)
	if err != nil {
		return err
	}
	ix.log.Info("search indexer streaming", zap.String("position", string(from)))
	txns := make(chan binlog.Txn, 64)
	errc := make(chan error, 1)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer close(txns)
		errc <- reader.Stream(sctx, from, func(t binlog.Txn) error {
			select {
			case txns <- t:
				return nil
			case <-sctx.Done():
				return sctx.Err()
			}
		})
	}()
	err = ix.apply(ctx, txns, reader)
	cancel()
	for range txns {
	}
	if serr := <-errc; err == nil && ctx.Err() == nil {
		err = serr
	}
	return err
}

// apply batches transactions from txns into Apply calls until txns closes
// or an Apply fails.
func (ix *Indexer) apply(ctx context.Context, txns <-chan binlog.Txn, reader *binlog.Reader) error {
	b := newPending()
	var last binlog.Txn
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	idle := time.NewTicker(time.Second)
	defer idle.Stop()
	flush := func() error {
		if b.empty() {
			return nil
		}
		batch := b.batch()
		if err := ix.cfg.Engine.Apply(ctx, ix.cfg.Source, batch, checkpointOf(string(last.Next))); err != nil {
			return err
		}
		ix.cfg.Metrics.applied(ix.cfg.Source, batch, b.skipped, b.txnTimes)
		ix.log.Debug("search batch applied", zap.Int("upserts", len(batch.Upserts)), zap.Int("deletes", len(batch.Deletes)),
			zap.Int("skipped", b.skipped), zap.Int("txns", len(b.txnTimes)), zap.String("position", string(last.Next)))
		b = newPending()
		return nil
	}
	for {
		select {
		case t, ok := <-txns:
			if !ok {
				return flush()
			}
			if b.empty() {
				timer.Reset(ix.cfg.Flush)
			}
			if err := ix.txn(ctx, t, b); err != nil {
				return err
			}
			last = t
			if b.len() >= ix.cfg.MaxBatch {
				timer.Stop()
				if err := flush(); err != nil {
					return err
				}
			}
		case <-timer.C:
			if err := flush(); err != nil {
				return err
			}
		case <-idle.C:
			// Caught up and idle: the feed is not behind, whatever the
			// last transaction's age.
			if b.empty() && len(txns) == 0 {
				ix.cfg.Metrics.caughtUp(ix.cfg.Source, reader.Stats())
			}
		}
	}
}

// pending is the documents of the transactions read since the last Apply,
// by msg_id: a later change of a message replaces an earlier one. An op
// with neither text nor the delete flag writes nothing.
type pending struct {
	ops      map[uint64]*op
	order    []uint64
	skipped  int
	txnTimes []time.Time
}

type op struct {
	doc     Doc
	del     bool
	haveSeq bool
}

func newPending() *pending { return &pending{ops: map[uint64]*op{}} }

func (p *pending) empty() bool { return len(p.ops) == 0 && p.skipped == 0 && len(p.txnTimes) == 0 }
func (p *pending) len() int    { return len(p.ops) }

func (p *pending) get(id uint64) *op {
	o := p.ops[id]
	if o == nil {
		o = &op{}
		p.ops[id] = o
		p.order = append(p.order, id)
	}
	return o
}

func (p *pending) batch() Batch {
	var b Batch
	for _, id := range p.order {
		o := p.ops[id]
		switch {
		case o.del:
			b.Deletes = append(b.Deletes, Ref{MsgID: id, ConvID: o.doc.ConvID})
		case o.haveSeq && o.doc.Text != "":
			b.Upserts = append(b.Upserts, o.doc)
		}
		// Text without a seq yet: its conv_msg row comes later and reads
		// the body then.
	}
	return b
}

// row reads a Change's image by column name.
type row struct {
	c   *binlog.Change
	img []any
}

func (r row) u(col string) uint64 {
	for i, n := range r.c.Columns {
		if n == col {
			switch v := r.img[i].(type) {
			case uint64:
				return v
			case int64:
				return uint64(v)
			}
		}
	}
	return 0
}

func (r row) b(col string) []byte {
	for i, n := range r.c.Columns {
		if n == col {
			switch v := r.img[i].(type) {
			case []byte:
				return v
			case string:
				return []byte(v)
			}
		}
	}
	return nil
}

func (r row) ms(col string) int64 {
	s := string(r.b(col))
	t, err := time.Parse("2006-01-02 15:04:05.999999", s)
	if err != nil {
		return 0
	}
	return t.UnixMilli()
}

// eraseRange deletes conv's documents with seq in [lo, hi]: those in the
// index and those b holds for it.
func (ix *Indexer) eraseRange(ctx context.Context, b *pending, conv, lo, hi uint64) error {
	ids, err := ix.cfg.Engine.Live(ctx, conv, lo, hi)
	if err != nil {
		return err
	}
	for _, id := range ids {
		o := b.get(id)
		o.del, o.doc.ConvID = true, conv
	}
	for _, o := range b.ops {
		if !o.del && o.doc.ConvID == conv && o.haveSeq && o.doc.Seq >= lo && o.doc.Seq <= hi {
			o.del = true
		}
	}
	return nil
}

// txn adds one transaction's changes to b.
//
// The cold tier changes what a delete means. The archiver deletes warm
// rows once their cold copy is catalogued, in transactions that also
// write its progress table (router.ArchiveProgressTable): those messages
// still exist (a history page reads them from the file) and stay in the
// index. A user's delete of a message whose warm row is already gone
// writes a tombstone (router.ColdTombstoneTable) instead of a row delete,
// and a delete of a range of them (clear chat) one row of
// router.ColdErasureTable: those remove them from the index.
func (ix *Indexer) txn(ctx context.Context, t binlog.Txn, b *pending) error {
	b.txnTimes = append(b.txnTimes, t.Time)
	snap := ix.cfg.Routes()
	archival := slices.ContainsFunc(t.Changes, func(c binlog.Change) bool { return c.Table == router.ArchiveProgressTable })
	for i := range t.Changes {
		c := &t.Changes[i]
		if c.Table == router.ArchiveProgressTable {
			continue
		}
		img := c.After
		if img == nil {
			img = c.Before
		}
		r := row{c: c, img: img}
		conv, msgID := r.u("conv_id"), r.u("msg_id")
		if c.Table == router.ColdErasureTable {
			// A range of archived messages erased (clear chat): the
			// index's live documents of it, and pending ones, go.
			p := snap.Physical("conv_msg", router.ShardOf(conv))
			if c.Kind == binlog.Insert && p.Datasource == ix.cfg.Source && p.Database == c.Schema {
				if err := ix.eraseRange(ctx, b, conv, r.u("min_seq"), r.u("max_seq")); err != nil {
					return err
				}
			}
			continue
		}
		if c.Table == router.ColdTombstoneTable {
			if archival {
				// The archiver's: a row changed since archived (MySQL
				// holds it, indexed) or already deleted (removed then).
				continue
			}
			p := snap.Physical("conv_msg", router.ShardOf(conv))
			if c.Kind == binlog.Insert && p.Datasource == ix.cfg.Source && p.Database == c.Schema {
				o := b.get(msgID)
				o.del, o.doc.ConvID = true, conv
			}
			continue
		}
		logical, _ := logicalOf(c.Table)
		p := snap.Physical(logical, router.ShardOf(conv))
		if p.Datasource != ix.cfg.Source || p.Database != c.Schema || p.Table != c.Table {
			continue // not where the shard lives now
		}
		if archival && c.Kind == binlog.Delete {
			continue // archived: the cold file holds it now
		}
		o := b.get(msgID)
		switch {
		case c.Kind == binlog.Delete:
			o.del, o.doc.ConvID = true, conv
		case logical == "msg_content":
			text, ok := ix.cfg.Extract.Text(uint8(r.u("msg_type")), r.b("content"))
			if !ok {
				if c.Kind == binlog.Insert && !o.del {
					b.skipped++
					*o = op{}
				} else {
					o.del, o.doc.ConvID = true, conv
				}
				continue
			}
			o.del = false
			o.doc.Hit = Hit{MsgID: msgID, ConvID: conv, Seq: o.doc.Seq, SenderUID: r.u("sender_uid"),
				MsgType: uint8(r.u("msg_type")), CreatedMs: r.ms("created_at")}
			o.doc.Text = text
			if !o.haveSeq {
				seq, found, err := ix.lookupSeq(ctx, c.Schema, c.Table, conv, msgID)
				if err != nil {
					return err
				}
				o.doc.Seq, o.haveSeq = seq, found
			}
		default: // conv_msg insert or update
			mt := uint8(r.u("msg_type"))
			if !ix.cfg.Extract.Indexed(mt) {
				if c.Kind == binlog.Update {
					o.del, o.doc.ConvID = true, conv // a recall
				} else {
					*o = op{}
				}
				continue
			}
			o.doc.Seq, o.haveSeq = r.u("seq"), true
			if o.doc.Text == "" && !o.del {
				d, found, err := ix.lookupBody(ctx, c.Schema, c.Table, conv, msgID)
				if err != nil {
					return err
				}
				if !found {
					continue // its msg_content insert will come and read the seq
				}
				d.Seq = o.doc.Seq
				o.doc = d
			}
		}
	}
	return nil
}

// sibling is the physical table of another logical table on the same
// shard: same database, same table index.
func sibling(table, logical string) string {
	return logical + table[strings.LastIndexByte(table, '_'):]
}

// lookupTimeout bounds one read of the other table.
const lookupTimeout = 5 * time.Second

func (ix *Indexer) lookupSeq(ctx context.Context, db, table string, conv, msgID uint64) (uint64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	var seq uint64
	err := ix.cfg.DB.QueryRowContext(ctx, fmt.Sprintf("SELECT seq FROM %s.%s WHERE msg_id = ? AND conv_id = ?",
		sqlq.Ident(db), sqlq.Ident(sibling(table, "conv_msg"))), msgID, conv).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("search: %s: read the seq of message %d: %w", ix.cfg.Source, msgID, err)
	}
	return seq, true, nil
}

func (ix *Indexer) lookupBody(ctx context.Context, db, table string, conv, msgID uint64) (Doc, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	var d Doc
	var body []byte
	var created string
	err := ix.cfg.DB.QueryRowContext(ctx, fmt.Sprintf("SELECT sender_uid, msg_type, content, created_at FROM %s.%s WHERE msg_id = ? AND conv_id = ?",
		sqlq.Ident(db), sqlq.Ident(sibling(table, "msg_content"))), msgID, conv).Scan(&d.SenderUID, &d.MsgType, &body, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Doc{}, false, nil
	}
	if err != nil {
		return Doc{}, false, fmt.Errorf("search: %s: read the body of message %d: %w", ix.cfg.Source, msgID, err)
	}
	text, ok := ix.cfg.Extract.Text(d.MsgType, body)
	if !ok {
		return Doc{}, false, nil
	}
	d.MsgID, d.ConvID, d.Text = msgID, conv, text
	t, err := time.Parse("2006-01-02 15:04:05.999999", created)
	if err != nil {
		return Doc{}, false, fmt.Errorf("search: %s: created_at %q of message %d: %w", ix.cfg.Source, created, msgID, err)
	}
	d.CreatedMs = t.UnixMilli()
	return d, true, nil
}
