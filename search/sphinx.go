package search

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"

	"github.com/convoy-im/convoy/router"
)

// The distributed engine: RT indexes on several searchd processes
// (Sphinx 2.2, or Manticore, which speaks the same SphinxQL), partitioned
// by shard, written and queried over the MySQL protocol.
//
// Partitions: partition p of P holds the conversations whose shard s
// (router.ShardOf(conv_id)) has s*P/1024 == p, contiguous shard ranges, so
// a conversation, and a one-conversation search, is on one partition, and
// a migration that moves shards between datasources never moves documents
// between partitions. A search over conversations of one partition reads
// that searchd's RT index alone; one over several reads the distributed
// index on the first partition, whose agents are every partition's RT
// index (the searchd configuration says so: deploy/sphinx/sphinx.conf).
//
// Exactness: Sphinx's own CJK support (ngram_len = 1, unigrams) cannot
// tell "中国" inside one run from "中。国", and its tokenizer is not ours.
// So Convoy tokenizes (analyzer.go) and gives Sphinx a text of encoded
// terms it only has to split on spaces: field uni holds words and CJK
// characters, field bi the CJK bigrams in order with a filler term
// between runs; a CJK query of three or more characters is the phrase of
// its bigrams in bi. Terms are [0-9a-z] only (charset_table 0..9, a..z):
//   - a CJK character: "u" and its code point as 6 hex digits
//   - a CJK bigram: "b" and both code points, 6 hex digits each
//   - a word of ASCII letters and digits up to 30 bytes: "w" and the word
//   - any other word: "h" and 16 hex digits of its 64-bit FNV-1a hash
//     (a collision would need two words with one hash: about 2^-64)
//
// msg_id is the document id; ids 0 and 2^64-1 are Sphinx's own markers and
// cannot be indexed (Apply refuses them). BIGINT attributes are signed:
// conv_id and the other uint64 values are stored bit for bit as int64, and
// so is msg_id once more as mid, which is what a hit reads (searchd types
// the id column signed, which no driver reads past 2^63).

// SphinxConfig says where the partitions are.
type SphinxConfig struct {
	// Partitions are the SphinxQL (mysql41) addresses of the searchd
	// processes, in partition order; at least one.
	Partitions []string
	// Index is the RT index on every partition (default "convoy_msgs");
	// Distributed the distributed index on Partitions[0] over all of them
	// (default "convoy_msgs_dist"); Checkpoints the RT index on
	// Partitions[0] holding the feed's checkpoints (default
	// "convoy_checkpoints").
	Index, Distributed, Checkpoints string
}

// Sphinx is the SphinxQL engine.
type Sphinx struct {
	cfg SphinxConfig
	dbs []*sql.DB
}

var _ Engine = (*Sphinx)(nil)

// OpenSphinx connects lazily to the partitions (nothing is dialled here).
func OpenSphinx(cfg SphinxConfig) (*Sphinx, error) {
	if len(cfg.Partitions) == 0 {
		return nil, errors.New("search: sphinx: no partitions configured")
	}
	if len(cfg.Partitions) > router.NumShards {
		return nil, fmt.Errorf("search: sphinx: %d partitions for %d shards", len(cfg.Partitions), router.NumShards)
	}
	if cfg.Index == "" {
		cfg.Index = "convoy_msgs"
	}
	if cfg.Distributed == "" {
		cfg.Distributed = "convoy_msgs_dist"
	}
	if cfg.Checkpoints == "" {
		cfg.Checkpoints = "convoy_checkpoints"
	}
	for _, n := range []string{cfg.Index, cfg.Distributed, cfg.Checkpoints} {
		if strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
			return nil, fmt.Errorf("search: sphinx: index name %q: letters, digits and _ only", n)
		}
	}
	s := &Sphinx{cfg: cfg}
	for _, addr := range cfg.Partitions {
		mc := mysql.NewConfig()
		mc.Net, mc.Addr = "tcp", addr
		// SphinxQL has no server-side prepared statements: the driver
		// prints values into the text (all of them integers or [0-9a-z]
		// terms Convoy encoded).
		mc.InterpolateParams = true
		mc.Timeout, mc.ReadTimeout, mc.WriteTimeout = sphinxDialTimeout, sphinxIOTimeout, sphinxIOTimeout
		conn, err := mysql.NewConnector(mc)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("search: sphinx %s: %w", addr, err)
		}
		db := sql.OpenDB(conn)
		db.SetMaxIdleConns(4)
		s.dbs = append(s.dbs, db)
	}
	return s, nil
}

const (
	sphinxDialTimeout = 2e9  // 2 s
	sphinxIOTimeout   = 10e9 // 10 s: a write batch of thousands of rows
	// sphinxRowsPerWrite bounds one REPLACE: SphinxQL's max_packet_size
	// is 8 MiB by default, and an IM message's terms are a few hundred bytes.
	sphinxRowsPerWrite = 1000
)

// partition is the partition of a conversation.
func (s *Sphinx) partition(conv uint64) int {
	return int(router.ShardOf(conv)) * len(s.dbs) / router.NumShards
}

// sphinxTerm encodes one term of tokens() (see the package comment above).
func sphinxTerm(t string) string {
	r, n := utf8.DecodeRuneInString(t)
	if isCJK(r) {
		if n == len(t) {
			return fmt.Sprintf("u%06x", r)
		}
		r2, _ := utf8.DecodeRuneInString(t[n:])
		return fmt.Sprintf("b%06x%06x", r, r2)
	}
	if len(t) <= 30 && strings.Trim(t, "abcdefghijklmnopqrstuvwxyz0123456789") == "" {
		return "w" + t
	}
	h := fnv.New64a()
	h.Write([]byte(t))
	return fmt.Sprintf("h%016x", h.Sum64())
}

// sphinxFields are a text's uni and bi field values.
func sphinxFields(text string) (uni, bi string) {
	var u, b strings.Builder
	runs := 0
	for _, seg := range segments(text) {
		if seg.kind == segWord {
			u.WriteString(sphinxTerm(seg.text))
			u.WriteByte(' ')
			continue
		}
		if runs > 0 {
			b.WriteString("x ") // the break between two runs
		}
		runs++
		runes := []rune(seg.text)
		for i, r := range runes {
			u.WriteString(sphinxTerm(string(r)))
			u.WriteByte(' ')
			if i+1 < len(runes) {
				b.WriteString(sphinxTerm(string(runes[i : i+2])))
				b.WriteByte(' ')
			}
		}
	}
	return u.String(), b.String()
}

// sphinxMatch is the MATCH() expression of an analysed query.
func sphinxMatch(p *Parsed) string {
	var b strings.Builder
	for _, c := range p.clauses {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		first := c.terms[0]
		r, n := utf8.DecodeRuneInString(first)
		switch {
		case len(c.terms) > 1:
			b.WriteString(`@bi "`)
			for i, t := range c.terms {
				if i > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(sphinxTerm(t))
			}
			b.WriteByte('"')
		case isCJK(r) && n < len(first):
			b.WriteString("@bi " + sphinxTerm(first))
		default:
			b.WriteString("@uni " + sphinxTerm(first))
		}
	}
	return b.String()
}

func sphinxID(msgID uint64) (string, error) {
	if msgID == 0 || msgID == ^uint64(0) {
		return "", fmt.Errorf("search: sphinx cannot index msg_id %d (its document id markers)", msgID)
	}
	return strconv.FormatUint(msgID, 10), nil
}

// signed is a uint64 as the int64 a BIGINT attribute stores.
func signed(u uint64) string { return strconv.FormatInt(int64(u), 10) }

// Apply writes each partition's documents, then the checkpoint: a crash
// between the two replays the batch, which REPLACE and UPDATE make
// harmless.
func (s *Sphinx) Apply(ctx context.Context, source string, b Batch, pos string) error {
	rows := make([][]string, len(s.dbs))
	for _, d := range b.Upserts {
		id, err := sphinxID(d.MsgID)
		if err != nil {
			return err
		}
		uni, bi := sphinxFields(d.Text)
		del := 0
		if d.Deleted {
			uni, bi, del = "", "", 1
		}
		p := s.partition(d.ConvID)
		rows[p] = append(rows[p], fmt.Sprintf("(%s,'%s','%s',%s,%s,%s,%s,%d,%d,%d)",
			id, uni, bi, signed(d.MsgID), signed(d.ConvID), signed(d.Seq), signed(d.SenderUID), d.MsgType, d.CreatedMs, del))
	}
	// A deleted message becomes a tombstone without text, as in bleve: the
	// flag is what queries filter, and the text leaves the index, so no
	// query of the index itself (another client of searchd, a query that
	// forgets the flag) can match a recalled message's words. An UPDATE of
	// the flag alone would keep them matchable.
	dels := make([][]string, len(s.dbs))
	for _, r := range b.Deletes {
		id, err := sphinxID(r.MsgID)
		if err != nil {
			return err
		}
		p := s.partition(r.ConvID)
		dels[p] = append(dels[p], fmt.Sprintf("(%s,'','',%s,%s,0,0,0,0,1)", id, signed(r.MsgID), signed(r.ConvID)))
	}
	for _, list := range [][][]string{rows, dels} {
		for p, rs := range list {
			for len(rs) > 0 {
				n := min(len(rs), sphinxRowsPerWrite)
				q := "REPLACE INTO " + s.cfg.Index + " (id, uni, bi, mid, conv_id, seq, sender_uid, msg_type, created_ms, deleted) VALUES " +
					strings.Join(rs[:n], ",")
				if _, err := s.dbs[p].ExecContext(ctx, q); err != nil {
					return fmt.Errorf("search: sphinx %s: write %d documents: %w", s.cfg.Partitions[p], n, err)
				}
				rs = rs[n:]
			}
		}
	}
	if source == "" {
		return nil
	}
	q := fmt.Sprintf("REPLACE INTO %s (id, name, pos) VALUES (%d, '%s', '%s')", s.cfg.Checkpoints, checkpointID(source),
		sphinxString(source), sphinxString(pos))
	if _, err := s.dbs[0].ExecContext(ctx, q); err != nil {
		return fmt.Errorf("search: sphinx %s: write the checkpoint of %s: %w", s.cfg.Partitions[0], source, err)
	}
	return nil
}

// checkpointID is a source's document id in the checkpoint index.
func checkpointID(source string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(source))
	return h.Sum64()>>1 | 1 // neither 0 nor 2^64-1
}

// sphinxString keeps the characters a datasource name or a GTID position
// has ("ds0", "0-1-42,1-2-7"); anything else is a bug upstream.
func sphinxString(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 128 && (r == '-' || r == ',' || r == '_' || r == '.' || r == ':' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return r
		}
		return -1
	}, s)
}

// Checkpoint reads source's position.
func (s *Sphinx) Checkpoint(ctx context.Context, source string) (string, error) {
	var pos string
	err := s.dbs[0].QueryRowContext(ctx, fmt.Sprintf("SELECT pos FROM %s WHERE id = %d", s.cfg.Checkpoints, checkpointID(source))).Scan(&pos)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("search: sphinx %s: read the checkpoint of %s: %w", s.cfg.Partitions[0], source, err)
	}
	return pos, nil
}

// Search sends q to the one partition holding all of q.Convs, or to the
// distributed index.
func (s *Sphinx) Search(ctx context.Context, q Query) ([]Hit, error) {
	p, convs, err := checkQuery(&q)
	if err != nil {
		return nil, err
	}
	if len(convs) == 0 {
		return nil, nil
	}
	db, index, in := s.target(convs)
	var b strings.Builder
	b.WriteString("SELECT mid, conv_id, seq, sender_uid, msg_type, created_ms")
	if q.HasCursor {
		// Sphinx's WHERE takes no OR: the cursor is an expression of the
		// select list, filtered by its alias. mid is msg_id as a signed
		// BIGINT: the order holds for msg_ids below 2^63.
		cmp := "<"
		if q.Asc {
			cmp = ">"
		}
		fmt.Fprintf(&b, ", IF(created_ms %[1]s %[2]d OR (created_ms = %[2]d AND mid %[1]s %[3]d), 1, 0) AS cur", cmp, q.CursorMs, int64(q.CursorMsgID))
	}
	b.WriteString(sphinxWhere(index, p, in, &q))
	if q.HasCursor {
		b.WriteString(" AND cur = 1")
	}
	// ranker=none: hits are ordered by attributes, relevance is not
	// computed; max_matches is the top-N every partition keeps.
	dir := "DESC"
	if q.Asc {
		dir = "ASC"
	}
	fmt.Fprintf(&b, " ORDER BY created_ms %[1]s, id %[1]s LIMIT 0, %[2]d OPTION ranker=none, max_matches=%[3]d", dir, q.Limit, max(q.Limit, 20))
	rows, err := db.QueryContext(ctx, b.String())
	if err != nil {
		return nil, fmt.Errorf("search: sphinx query on %s: %w", index, err)
	}
	defer rows.Close()
	var hits []Hit
	for rows.Next() {
		var h Hit
		var mid, conv, seq, sender, cur int64
		dest := []any{&mid, &conv, &seq, &sender, &h.MsgType, &h.CreatedMs}
		if q.HasCursor {
			dest = append(dest, &cur)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("search: sphinx hit: %w", err)
		}
		h.MsgID, h.ConvID, h.Seq, h.SenderUID = uint64(mid), uint64(conv), uint64(seq), uint64(sender)
		hits = append(hits, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("search: sphinx query on %s: %w", index, err)
	}
	return hits, nil
}

// sphinxWhere is the FROM and WHERE of q on index (its cursor aside).
func sphinxWhere(index string, p *Parsed, in []string, q *Query) string {
	var b strings.Builder
	fmt.Fprintf(&b, " FROM %s WHERE MATCH('%s') AND deleted = 0 AND conv_id IN (%s)", index, sphinxMatch(p), strings.Join(in, ","))
	if q.HasSender {
		fmt.Fprintf(&b, " AND sender_uid = %s", signed(q.SenderUID))
	}
	if q.HasMsgType {
		fmt.Fprintf(&b, " AND msg_type = %d", q.MsgType)
	}
	if q.HasSince {
		fmt.Fprintf(&b, " AND created_ms >= %d", q.SinceMs)
	}
	if q.HasBefore {
		fmt.Fprintf(&b, " AND created_ms < %d", q.BeforeMs)
	}
	return b.String()
}

// Counts implements Engine: the matches grouped by conversation, on the
// partition holding them all or the distributed index (each partition
// counts its own conversations: the groups are exact).
func (s *Sphinx) Counts(ctx context.Context, q Query) (map[uint64]int64, error) {
	q.HasCursor, q.Limit = false, 1
	p, convs, err := checkQuery(&q)
	if err != nil || len(convs) == 0 {
		return nil, err
	}
	db, index, in := s.target(convs)
	n := len(convs)
	rows, err := db.QueryContext(ctx, fmt.Sprintf("SELECT conv_id, COUNT(*) AS n%s GROUP BY conv_id LIMIT 0, %d OPTION ranker=none, max_matches=%d",
		sphinxWhere(index, p, in, &q), n, max(n, 20)))
	if err != nil {
		return nil, fmt.Errorf("search: sphinx query on %s: %w", index, err)
	}
	defer rows.Close()
	out := map[uint64]int64{}
	for rows.Next() {
		var conv, count int64
		if err := rows.Scan(&conv, &count); err != nil {
			return nil, fmt.Errorf("search: sphinx count: %w", err)
		}
		out[uint64(conv)] = count
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("search: sphinx query on %s: %w", index, err)
	}
	return out, nil
}

// Live implements Engine, on the conversation's partition, a page at a
// time in mid order (msg_id as the signed BIGINT attribute: ids past 2^63
// come first).
func (s *Sphinx) Live(ctx context.Context, conv, lo, hi uint64) ([]uint64, error) {
	db := s.dbs[s.partition(conv)]
	var out []uint64
	after := ""
	for {
		rows, err := db.QueryContext(ctx, fmt.Sprintf("SELECT mid, seq FROM %s WHERE conv_id = %s AND deleted = 0%s ORDER BY mid ASC LIMIT 0, %d OPTION max_matches=%d",
			s.cfg.Index, signed(conv), after, liveBatch, liveBatch))
		if err != nil {
			return nil, fmt.Errorf("search: sphinx query on %s: %w", s.cfg.Index, err)
		}
		n, last := 0, int64(0)
		for rows.Next() {
			var mid, seq int64
			if err := rows.Scan(&mid, &seq); err != nil {
				rows.Close()
				return nil, fmt.Errorf("search: sphinx live documents: %w", err)
			}
			n, last = n+1, mid
			if uint64(seq) >= lo && uint64(seq) <= hi {
				out = append(out, uint64(mid))
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("search: sphinx query on %s: %w", s.cfg.Index, err)
		}
		if n < liveBatch {
			return out, nil
		}
		after = fmt.Sprintf(" AND mid > %d", last)
	}
}

// target is where a query of convs goes: the one partition holding them
// all, or the distributed index; in are the conversations as Sphinx's
// signed BIGINTs.
func (s *Sphinx) target(convs []uint64) (*sql.DB, string, []string) {
	part, index := s.partition(convs[0]), s.cfg.Index
	in := make([]string, len(convs))
	for i, c := range convs {
		in[i] = signed(c)
		if s.partition(c) != part {
			part, index = -1, s.cfg.Distributed
		}
	}
	if part < 0 {
		return s.dbs[0], index, in
	}
	return s.dbs[part], index, in
}

// Close closes the connections.
func (s *Sphinx) Close() error {
	var errs []error
	for _, db := range s.dbs {
		errs = append(errs, db.Close())
	}
	return errors.Join(errs...)
}
