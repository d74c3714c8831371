package archive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// Connector opens a connection to a datasource for one archiver run: the
// datasource's account, password and TLS, utf8mb4 (cmd/convoy builds it
// from proxy/backend's helpers). The run closes it.
type Connector func(ctx context.Context, ds router.Datasource) (*client.Conn, error)

// key is a conv_msg primary key, or with UID an im_inbox one.
type key struct {
	UID  uint64 `json:"uid,omitempty"`
	Conv uint64 `json:"conv"`
	Seq  uint64 `json:"seq"`
}

func (k key) less(o key) bool {
	return k.UID < o.UID || k.UID == o.UID && (k.Conv < o.Conv || k.Conv == o.Conv && k.Seq < o.Seq)
}

func keyOf(r cold.Row) key { return key{r.UID, r.ConvID, r.Seq} }

// where is the key's primary-key condition in k's table.
func (k key) where(kd *kind) string {
	if kd == inbox {
		return fmt.Sprintf("(uid = %d AND conv_id = %d AND seq = %d)", k.UID, k.Conv, k.Seq)
	}
	return fmt.Sprintf("(conv_id = %d AND seq = %d)", k.Conv, k.Seq)
}

// source reads and deletes one logical shard's archived rows on the
// physical tables the routes put it in. Every statement goes as text
// (COM_QUERY, values printed as decimal integers): the rows archived must
// be the text-protocol values a client of Convoy gets, byte for byte.
type source struct {
	conn            *client.Conn
	shard           router.Shard
	msg, content    string // quoted db.table
	inbox, member   string // quoted db.table of im_inbox and im_conv_member
	progress        string // quoted db._convoy_archive_progress
	convs           string // quoted db._convoy_cold_conv
	tombstones      string // quoted db._convoy_cold_tombstone
	files           string // quoted db._convoy_cold_files
	erasures        string // quoted db._convoy_cold_erasure
	shared          bool   // the physical table holds other shards too
	timeout         time.Duration
	msgIdx, bodyIdx int // msg_id's position in conv_msg's / msg_content's columns
}

// progressTable records, in the shard's own database, how many delete
// chunks of a file have committed: it is written in the transaction that
// deletes the chunk, so a crash can never leave the rows deleted without
// the record or the reverse (etcd cannot be part of that transaction).
const progressTable = router.ArchiveProgressTable

// ConvTable says, per conversation, which seqs its archived rows whose
// warm copy is gone span (min_seq..max_seq), in the shard's database next
// to conv_msg. It is written in the transaction that deletes the rows, so
// a reader that finds rows missing from MySQL finds them counted here in
// the same or a later read: the engine's cheap "does this page need the
// cold tier" check (proxy/engine/cold.go reads it under this name).
const ConvTable = router.ColdRangesTable

// TombstoneTable lists archived rows cold reads must skip: rows deleted
// through Convoy after their warm copy was gone (the engine writes them in
// the deleting statement's transaction), and the rows of a file whose warm
// row the archiver found changed or deleted by a user when it came to
// delete it (written in the chunk's delete transaction: the file's copy is
// stale, MySQL serves the row or nothing does).
const TombstoneTable = router.ColdTombstoneTable

// FilesTable is the cold catalog's MySQL part, per conversation and cold
// history file: the seqs of the conversation's rows in the file whose warm
// copy the archiver has dealt with (deleted, or tombstoned as changed or
// gone), written in the transaction that deletes them. A cold read finds
// here, in the same database as the rows and after reading them, which
// files may stand in for a row missing from MySQL and up to which seq:
// nothing in etcd is on that path, and a delete chunk costs etcd nothing.
// Within a file a conversation's rows are contiguous in key order, and
// chunks go in that order, so the dealt-with rows are a prefix:
// [min_seq, max_seq] of the file's rows of the conversation.
const FilesTable = router.ColdFilesTable

// ErasureTable lists the seq ranges of a conversation's archived rows a
// DELETE of the conversation's rows erased (the engine writes them in the
// deleting statement's transaction): cold reads treat them as absent.
const ErasureTable = router.ColdErasureTable

func newSource(conn *client.Conn, snap *router.Snapshot, shard router.Shard, timeout time.Duration) *source {
	q := func(p router.Physical) string {
		return sqlq.Ident(p.Database) + "." + sqlq.Ident(p.Table)
	}
	m, c := snap.Physical("conv_msg", shard), snap.Physical("msg_content", shard)
	ib, mb := snap.Physical("im_inbox", shard), snap.Physical("im_conv_member", shard)
	shared := false
	for _, g := range snap.AllPhysical("conv_msg") {
		if g.Physical == m {
			shared = len(g.Shards) > 1
		}
	}
	conn.ReadTimeout, conn.WriteTimeout = timeout, timeout
	in := func(table string) string { return sqlq.Ident(m.Database) + "." + sqlq.Ident(table) }
	return &source{conn: conn, shard: shard, msg: q(m), content: q(c), inbox: q(ib), member: q(mb), shared: shared, timeout: timeout,
		progress: in(progressTable), convs: in(ConvTable), tombstones: in(TombstoneTable), files: in(FilesTable), erasures: in(ErasureTable), msgIdx: -1, bodyIdx: -1}
}

func (s *source) exec(sql string) (*mysql.Result, error) {
	r, err := s.conn.Execute(sql)
	if err != nil {
		return nil, fmt.Errorf("archive: shard %s: %w", s.shard, err)
	}
	return r, nil
}

// mine: the row belongs to this logical shard (a shared table holds
// others); router.ShardOf is CRC32(key) % 1024, as MariaDB computes it.
// (Every physical table of a layout holds the same shards, so conv_msg's
// sharing stands for im_inbox's too.)
func (s *source) mine(k *kind, r key) bool {
	v := r.Conv
	if k == inbox {
		v = r.UID
	}
	return !s.shared || router.ShardOf(v) == s.shard
}

// scanned is one key, its day column's text and, for an inbox row,
// whether its member has read it.
type scanned struct {
	key
	at   string
	read bool
}

// scan returns up to n of k's keys after `after` in primary-key order
// with their day column (and an inbox row's read flag, from its member's
// last_read_seq: im_conv_member is uid-keyed like im_inbox, so on the same
// shard). It reads only those columns, n rows at a time, so each statement
// is short whatever the day holds (neither table's key starts with the
// day: finding a day's rows costs a pass over the table's keys).
func (s *source) scan(k *kind, after *key, n int) ([]scanned, error) {
	var sql string
	if k == inbox {
		where := ""
		if after != nil {
			where = fmt.Sprintf(" WHERE i.uid > %d OR (i.uid = %d AND (i.conv_id > %d OR (i.conv_id = %d AND i.seq > %d)))",
				after.UID, after.UID, after.Conv, after.Conv, after.Seq)
		}
		sql = "SELECT i.uid, i.conv_id, i.seq, i.send_time, i.seq <= IFNULL(m.last_read_seq, 0) FROM " + s.inbox +
			" i LEFT JOIN " + s.member + " m ON m.uid = i.uid AND m.conv_id = i.conv_id" + where + " ORDER BY i.uid, i.conv_id, i.seq LIMIT " + strconv.Itoa(n)
	} else {
		where := ""
		if after != nil {
			where = fmt.Sprintf(" WHERE conv_id > %d OR (conv_id = %d AND seq > %d)", after.Conv, after.Conv, after.Seq)
		}
		sql = "SELECT 0, conv_id, seq, created_at, 1 FROM " + s.msg + where + " ORDER BY conv_id, seq LIMIT " + strconv.Itoa(n)
	}
	r, err := s.exec(sql)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	rows, err := cold.TextRows(r.Resultset)
	if err != nil {
		return nil, err
	}
	out := make([]scanned, 0, len(rows))
	for _, v := range rows {
		var nums [3]uint64
		for i := range nums {
			if nums[i], err = strconv.ParseUint(string(v[i]), 10, 64); err != nil {
				return nil, fmt.Errorf("archive: shard %s: unexpected key row %q", s.shard, v)
			}
		}
		if v[3] == nil {
			return nil, fmt.Errorf("archive: shard %s: unexpected key row %q", s.shard, v)
		}
		out = append(out, scanned{key{nums[0], nums[1], nums[2]}, string(v[3]), string(v[4]) == "1"})
	}
	return out, nil
}

// floor is the seq of conv's n-th newest row, 0 if it has fewer (a
// backward scan of n keys of the primary key).
func (s *source) floor(conv uint64, n int) (uint64, error) {
	return s.number(fmt.Sprintf("SELECT seq FROM %s WHERE conv_id = %d ORDER BY seq DESC LIMIT 1 OFFSET %d", s.msg, conv, n-1))
}

// number runs a query of one unsigned integer column: its first row's
// value, 0 if it returns none.
func (s *source) number(sql string) (uint64, error) {
	r, err := s.exec(sql)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	rows, err := cold.TextRows(r.Resultset)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	return strconv.ParseUint(string(rows[0][0]), 10, 64)
}

// oldest is the day column of the shard's oldest warm k row ("" if
// none): where an archive run starts, and what SHOW ARCHIVE reports.
func (s *source) oldest(k *kind) (string, error) {
	table := s.msg
	if k == inbox {
		table = s.inbox
	}
	where := ""
	if s.shared {
		where = fmt.Sprintf(" WHERE CRC32(%s) %% 1024 = %d", k.shardKey, s.shard)
	}
	r, err := s.exec("SELECT MIN(" + k.dayColumn + ") FROM " + table + where)
	var me *mysql.MyError
	if k == inbox && errors.As(err, &me) && me.Code == mysql.ER_NO_SUCH_TABLE {
		return "", nil // a deployment without the inbox tables: nothing to clean up
	}
	if err != nil {
		return "", err
	}
	defer r.Close()
	rows, err := cold.TextRows(r.Resultset)
	if err != nil || len(rows) != 1 || rows[0][0] == nil {
		return "", err
	}
	return string(rows[0][0]), nil
}

// fetch reads k's rows of keys (those still there) in key order with the
// column definitions as the server sent them for SELECT *: conv_msg rows
// with their msg_content rows (two statements rather than a join, whose
// outer side's definitions would lose NOT NULL), or im_inbox rows. lock
// takes the rows' locks (FOR UPDATE, inside the caller's transaction).
func (s *source) fetch(k *kind, keys []key, lock bool) (cold.Tables, []cold.Row, error) {
	var t cold.Tables
	suffix := ""
	if lock {
		suffix = " FOR UPDATE"
	}
	cond := keysWhere(k, keys)
	if k == inbox {
		cols, rows, err := s.query("SELECT * FROM " + s.inbox + " WHERE " + cond + " ORDER BY uid, conv_id, seq" + suffix)
		if err != nil {
			return t, nil, err
		}
		t.Inbox = cols
		out := make([]cold.Row, 0, len(rows))
		for _, r := range rows {
			row := cold.Row{Msg: r}
			for name, v := range map[string]*uint64{"uid": &row.UID, "conv_id": &row.ConvID, "seq": &row.Seq} {
				if *v, err = uintColumn(cols, r, "im_inbox", name); err != nil {
					return t, nil, err
				}
			}
			out = append(out, row)
		}
		return t, out, nil
	}
	msgs, mrows, err := s.query("SELECT * FROM " + s.msg + " WHERE " + cond + " ORDER BY conv_id, seq" + suffix)
	if err != nil {
		return t, nil, err
	}
	t.Msg = msgs
	if s.msgIdx = columnIndex(msgs, "msg_id"); s.msgIdx < 0 {
		return t, nil, fmt.Errorf("archive: %s has no msg_id column", s.msg)
	}
	ids := make([]string, 0, len(mrows))
	for _, r := range mrows {
		ids = append(ids, string(r[s.msgIdx]))
	}
	if len(ids) == 0 {
		ids = append(ids, "NULL")
	}
	bodies, brows, err := s.query("SELECT * FROM " + s.content + " WHERE msg_id IN (" + strings.Join(ids, ",") + ")" + suffix)
	if err != nil {
		return t, nil, err
	}
	t.Content = bodies
	if s.bodyIdx = columnIndex(bodies, "msg_id"); s.bodyIdx < 0 {
		return t, nil, fmt.Errorf("archive: %s has no msg_id column", s.content)
	}
	byID := make(map[string][][]byte, len(brows))
	for _, r := range brows {
		byID[string(r[s.bodyIdx])] = r
	}
	rows := make([]cold.Row, 0, len(mrows))
	for _, r := range mrows {
		row := cold.Row{Msg: r, Content: byID[string(r[s.msgIdx])]}
		if row.ConvID, row.Seq, err = parseKey(t, r); err != nil {
			return t, nil, err
		}
		rows = append(rows, row)
	}
	return t, rows, nil
}

func (s *source) query(sql string) ([]cold.Column, [][][]byte, error) {
	r, err := s.exec(sql)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	if r.Resultset == nil {
		return nil, nil, fmt.Errorf("[BUG] archive: %q returned no result set", sql)
	}
	cols := make([]cold.Column, len(r.Fields))
	for i, f := range r.Fields {
		cols[i] = cold.ColumnFromField(f)
	}
	rows, err := cold.TextRows(r.Resultset)
	return cols, rows, err
}

func columnIndex(cols []cold.Column, name string) int {
	return slices.IndexFunc(cols, func(c cold.Column) bool { return c.Name == name })
}

// keysWhere is the condition selecting keys of k's table: an OR of key
// equalities, a set of ranges on the primary key (MariaDB does not use an
// index for a row-constructor IN list).
func keysWhere(k *kind, keys []key) string {
	if len(keys) == 0 {
		return "FALSE"
	}
	var b strings.Builder
	for i, key := range keys {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString(key.where(k))
	}
	return b.String()
}

// parseKey reads conv_id and seq from a conv_msg row.
func parseKey(t cold.Tables, r [][]byte) (uint64, uint64, error) {
	conv, err := uintColumn(t.Msg, r, "conv_msg", "conv_id")
	if err != nil {
		return 0, 0, err
	}
	seq, err := uintColumn(t.Msg, r, "conv_msg", "seq")
	return conv, seq, err
}

// uintColumn reads the unsigned integer column name of row r.
func uintColumn(cols []cold.Column, r [][]byte, table, name string) (uint64, error) {
	j := columnIndex(cols, name)
	if j < 0 || r[j] == nil {
		return 0, fmt.Errorf("archive: %s row without %s", table, name)
	}
	v, err := strconv.ParseUint(string(r[j]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("archive: %s.%s %q: %w", table, name, r[j], err)
	}
	return v, nil
}

// ensureTables creates the archiver's tables in the shard's database if
// they are missing: the delete step's progress rows, the conversations'
// archived ranges and the tombstones the engine writes. They exist before
// the first file of the shard is catalogued, so a proxy that learns the
// shard has files finds them.
func (s *source) ensureTables() error {
	for _, ddl := range []string{"CREATE TABLE IF NOT EXISTS " + s.progress + ` (
  file        VARCHAR(512)    NOT NULL,
  chunks_done INT UNSIGNED    NOT NULL,
  kept        BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'rows found edited since archived: kept warm',
  gone        BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'rows found deleted by users since archived',
  updated_at  DATETIME(3)     NOT NULL,
  PRIMARY KEY (file)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='Convoy archiver: delete chunks committed per cold file'`,
		// (Tables made before the counts were kept there.)
		"ALTER TABLE " + s.progress + " ADD COLUMN IF NOT EXISTS kept BIGINT UNSIGNED NOT NULL DEFAULT 0, ADD COLUMN IF NOT EXISTS gone BIGINT UNSIGNED NOT NULL DEFAULT 0",
		"CREATE TABLE IF NOT EXISTS " + s.files + ` (
  conv_id    BIGINT UNSIGNED NOT NULL,
  file       VARCHAR(512)    NOT NULL COMMENT 'the cold file (object key)',
  min_seq    BIGINT UNSIGNED NOT NULL,
  max_seq    BIGINT UNSIGNED NOT NULL COMMENT 'read bound: the file may serve seqs min_seq..max_seq of conv_id',
  min_msg_id BIGINT UNSIGNED NOT NULL,
  max_msg_id BIGINT UNSIGNED NOT NULL,
  n_rows     BIGINT UNSIGNED NOT NULL,
  updated_at DATETIME(3)     NOT NULL,
  PRIMARY KEY (conv_id, file)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='Convoy cold tier: per conversation, the rows of each cold file whose warm copy the archiver deleted'`,
		"CREATE TABLE IF NOT EXISTS " + s.convs + ` (
  conv_id    BIGINT UNSIGNED NOT NULL,
  min_seq    BIGINT UNSIGNED NOT NULL,
  max_seq    BIGINT UNSIGNED NOT NULL,
  updated_at DATETIME(3)     NOT NULL,
  PRIMARY KEY (conv_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='Convoy cold tier: seqs of each conversation''s archived rows whose warm copy was deleted'`,
		"CREATE TABLE IF NOT EXISTS " + s.tombstones + ` (
  conv_id    BIGINT UNSIGNED NOT NULL,
  tbl        VARCHAR(16)     NOT NULL COMMENT 'conv_msg or msg_content',
  seq        BIGINT UNSIGNED NOT NULL,
  msg_id     BIGINT UNSIGNED NOT NULL,
  deleted_at DATETIME(3)     NOT NULL,
  PRIMARY KEY (conv_id, tbl, seq),
  KEY by_msg (conv_id, tbl, msg_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='Convoy cold tier: archived rows deleted through Convoy (skipped by cold reads)'`,
		"CREATE TABLE IF NOT EXISTS " + s.erasures + ` (
  conv_id      BIGINT UNSIGNED NOT NULL,
  tbl          VARCHAR(16)     NOT NULL COMMENT 'conv_msg or msg_content',
  min_seq      BIGINT UNSIGNED NOT NULL,
  max_seq      BIGINT UNSIGNED NOT NULL,
  requested_at DATETIME(3)     NOT NULL,
  erased_at    DATETIME(3)     NULL COMMENT 'when no cold file held the rows any more (NULL: pending)',
  PRIMARY KEY (conv_id, tbl, min_seq, max_seq),
  KEY pending (erased_at, requested_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='Convoy cold tier: seq ranges of archived rows a DELETE erased (skipped by cold reads)'`,
		// (Tombstone tables made before files were rewritten without the
		// rows: erase.go.)
		"ALTER TABLE " + s.tombstones + " ADD COLUMN IF NOT EXISTS erased_at DATETIME(3) NULL COMMENT 'when no cold file held the row any more (NULL: pending)', ADD INDEX IF NOT EXISTS pending (erased_at, deleted_at)"} {
		if _, err := s.exec(ddl); err != nil {
			return err
		}
	}
	return nil
}

// chunksDone is the progress row of file (0 if none).
func (s *source) chunksDone(file string) (int, error) {
	n, err := s.number("SELECT chunks_done FROM " + s.progress + " WHERE file = " + rewrite.QuoteString(file))
	return int(n), err
}

// startProgress creates file's progress row at done if it has none, so
// that every chunk transaction can lock it (lockProgress): a missing row
// would only take a gap lock, which does not exclude another archiver.
func (s *source) startProgress(file string, done int) error {
	_, err := s.exec(fmt.Sprintf("INSERT IGNORE INTO %s (file, chunks_done, updated_at) VALUES (%s, %d, UTC_TIMESTAMP(3))",
		s.progress, rewrite.QuoteString(file), done))
	return err
}

// lockProgress reads file's progress row with a write lock, in the
// caller's transaction: the chunk count committed now, and no other
// archiver's chunk transaction of the file can commit until this one
// ends.
func (s *source) lockProgress(file string) (int, error) {
	n, err := s.number("SELECT chunks_done FROM " + s.progress + " WHERE file = " + rewrite.QuoteString(file) + " FOR UPDATE")
	return int(n), err
}

// noteChunk records, in the caller's transaction, that a history file's
// chunk (all its rows, in the file's key order) is dealt with: its rows
// that must not be read from the file (skip: changed or deleted since
// archived) as tombstones, and each conversation's read bound in the file
// (FilesTable) moved past the chunk. Nothing is read from the file beyond
// a bound, so a reader never takes a row the archiver has not compared
// yet (deleted by a user meanwhile, say) from the file.
func (s *source) noteChunk(file string, all []cold.Row, skip []skipped) error {
	if len(skip) > 0 {
		gone := make(map[key]bool, len(skip))
		for _, sk := range skip {
			gone[sk.key] = true
		}
		var b strings.Builder
		b.WriteString("INSERT IGNORE INTO " + s.tombstones + " (conv_id, tbl, seq, msg_id, deleted_at) VALUES ")
		n := 0
		for _, r := range all {
			if !gone[keyOf(r)] {
				continue
			}
			tbls := []string{"conv_msg"}
			if r.Content != nil {
				tbls = append(tbls, "msg_content")
			}
			for _, tbl := range tbls {
				if n > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, "(%d,'%s',%d,%d,UTC_TIMESTAMP(3))", r.ConvID, tbl, r.Seq, r.MsgID)
				n++
			}
		}
		if _, err := s.exec(b.String()); err != nil {
			return err
		}
	}
	return s.insertBounds(file, all)
}

// insertBounds widens file's read bounds over all (rows of the file in
// its key order): per conversation, their seqs and msg_ids, and counts
// them.
func (s *source) insertBounds(file string, all []cold.Row) error {
	var b strings.Builder
	b.WriteString("INSERT INTO " + s.files + " (conv_id, file, min_seq, max_seq, min_msg_id, max_msg_id, n_rows, updated_at) VALUES ")
	for i := 0; i < len(all); {
		j := i
		lo, hi := all[i].MsgID, all[i].MsgID
		for j+1 < len(all) && all[j+1].ConvID == all[i].ConvID {
			j++
			lo, hi = min(lo, all[j].MsgID), max(hi, all[j].MsgID)
		}
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "(%d,%s,%d,%d,%d,%d,%d,UTC_TIMESTAMP(3))", all[i].ConvID, rewrite.QuoteString(file), all[i].Seq, all[j].Seq, lo, hi, j-i+1)
		i = j + 1
	}
	b.WriteString(" ON DUPLICATE KEY UPDATE min_seq = LEAST(min_seq, VALUES(min_seq)), max_seq = GREATEST(max_seq, VALUES(max_seq))," +
		" min_msg_id = LEAST(min_msg_id, VALUES(min_msg_id)), max_msg_id = GREATEST(max_msg_id, VALUES(max_msg_id))," +
		" n_rows = n_rows + VALUES(n_rows), updated_at = VALUES(updated_at)")
	_, err := s.exec(b.String())
	return err
}

// untombstoned returns the history keys without a conv_msg tombstone, n
// keys a statement.
func (s *source) untombstoned(keys []key, n int) ([]key, error) {
	gone := map[key]bool{}
	for rest := keys; len(rest) > 0; {
		batch := rest[:min(len(rest), n)]
		rest = rest[len(batch):]
		_, rows, err := s.query("SELECT conv_id, seq FROM " + s.tombstones + " WHERE tbl = 'conv_msg' AND (" + keysWhere(history, batch) + ")")
		if err != nil {
			return nil, err
		}
		for _, v := range rows {
			c, err1 := strconv.ParseUint(string(v[0]), 10, 64)
			q, err2 := strconv.ParseUint(string(v[1]), 10, 64)
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("archive: %s row %q: %w", s.tombstones, v, err)
			}
			gone[key{Conv: c, Seq: q}] = true
		}
	}
	return slices.DeleteFunc(keys, func(k key) bool { return gone[k] }), nil
}

// bounds reads file's read bounds (FilesTable): per conversation, the
// last seq dealt with.
func (s *source) bounds(file string) (map[uint64]uint64, error) {
	_, rows, err := s.query("SELECT conv_id, max_seq FROM " + s.files + " WHERE file = " + rewrite.QuoteString(file))
	if err != nil {
		return nil, err
	}
	out := make(map[uint64]uint64, len(rows))
	for _, v := range rows {
		c, err1 := strconv.ParseUint(string(v[0]), 10, 64)
		m, err2 := strconv.ParseUint(string(v[1]), 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("archive: %s row %q: %w", s.files, v, err)
		}
		out[c] = m
	}
	return out, nil
}

// counts reads the kept and gone rows the file's committed chunks found.
func (s *source) counts(file string) (kept, gone int64, err error) {
	_, rows, err := s.query("SELECT kept, gone FROM " + s.progress + " WHERE file = " + rewrite.QuoteString(file))
	if err != nil || len(rows) == 0 {
		return 0, 0, err
	}
	k, err1 := strconv.ParseInt(string(rows[0][0]), 10, 64)
	g, err2 := strconv.ParseInt(string(rows[0][1]), 10, 64)
	return k, g, errors.Join(err1, err2)
}

// deleteChunk deletes k's rows (whose locks the caller's transaction
// holds) and records chunk `done` of file as committed with the rows it
// found kept and gone, in that transaction; deleting history rows also
// widens their conversations' archived ranges (ConvTable).
func (s *source) deleteChunk(k *kind, rows []cold.Row, file string, done int, kept, gone int) error {
	if len(rows) > 0 {
		keys := make([]key, len(rows))
		var ids []string
		for i, r := range rows {
			keys[i] = keyOf(r)
			if r.Content != nil {
				ids = append(ids, string(r.Content[s.bodyIdx]))
			}
		}
		table := s.msg
		if k == inbox {
			table = s.inbox
		}
		res, err := s.exec("DELETE FROM " + table + " WHERE " + keysWhere(k, keys))
		if err != nil {
			return err
		}
		if int(res.AffectedRows) != len(rows) {
			// The rows are locked: anything else is a bug, and the caller
			// rolls back.
			return fmt.Errorf("[BUG] archive: deleted %d of %d locked %s rows", res.AffectedRows, len(rows), k.table)
		}
		if len(ids) > 0 {
			if _, err := s.exec("DELETE FROM " + s.content + " WHERE msg_id IN (" + strings.Join(ids, ",") + ")"); err != nil {
				return err
			}
		}
		if k == history {
			if _, err := s.exec(s.noteRanges(rows)); err != nil {
				return err
			}
		}
	}
	_, err := s.exec(fmt.Sprintf("INSERT INTO %s (file, chunks_done, kept, gone, updated_at) VALUES (%s, %d, %d, %d, UTC_TIMESTAMP(3)) "+
		"ON DUPLICATE KEY UPDATE chunks_done = VALUES(chunks_done), kept = kept + VALUES(kept), gone = gone + VALUES(gone), updated_at = VALUES(updated_at)",
		s.progress, rewrite.QuoteString(file), done, kept, gone))
	return err
}

// noteRanges widens each conversation's archived range (ConvTable) to
// cover rows (in key order), in the delete's transaction.
func (s *source) noteRanges(rows []cold.Row) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + s.convs + " (conv_id, min_seq, max_seq, updated_at) VALUES ")
	for i := 0; i < len(rows); {
		j := i
		for j+1 < len(rows) && rows[j+1].ConvID == rows[i].ConvID {
			j++
		}
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "(%d,%d,%d,UTC_TIMESTAMP(3))", rows[i].ConvID, rows[i].Seq, rows[j].Seq)
		i = j + 1
	}
	b.WriteString(" ON DUPLICATE KEY UPDATE min_seq = LEAST(min_seq, VALUES(min_seq)), max_seq = GREATEST(max_seq, VALUES(max_seq)), updated_at = VALUES(updated_at)")
	return b.String()
}

// forget drops file's progress row once etcd records the file deleted.
func (s *source) forget(file string) error {
	_, err := s.exec("DELETE FROM " + s.progress + " WHERE file = " + rewrite.QuoteString(file))
	return err
}
