package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/internal/ratelimit"
	"github.com/convoy-im/convoy/internal/sqlq"
)

// Checksummer is step 4 of a shard migration (verify): it compares one
// shard's rows in two tables (source and target; any servers, databases and
// names) by segmented aggregate checksums, by sampled rows compared column
// by column, and repairs a differing segment (repair.go).
//
// Segments are consecutive primary-key ranges of about segmentRows source
// rows, cut by keyset on the source: (After, Upto], the first open below,
// the last open above, so together they cover every key either side could
// hold and an extra row on the target falls into some segment. Each
// aggregate is one statement per side, so no snapshot is held longer than
// one segment's read; the two sides are read concurrently but not at one
// instant, so while writes flow (dual-write, binlog apply) a segment can
// differ for a moment. A differing segment is therefore read again after a
// delay (doubling each time) and only declared different if it still
// differs after the last recheck.
//
// The row digest is CONCAT_WS('#', ...) of every stored column, each in an
// exact text form: integers, DECIMAL, DOUBLE and temporal values as the
// server prints them (DOUBLE prints the shortest text that reads back to
// the same bits, DATETIME(3) its three decimals, TIMESTAMP in UTC), FLOAT
// widened to DOUBLE first (FLOAT prints only six digits), every string,
// binary, ENUM, SET, JSON or BLOB value as MD5 of its bytes (exact bytes,
// so case or trailing-space changes count, and a fixed length whatever the
// value's size: a CONCAT longer than max_allowed_packet would be NULL and
// silently skipped). CONCAT_WS skips NULLs, so a last element lists
// ISNULL() of each nullable column: NULL and the empty string differ. No
// element can contain '#', so the digest determines the row.
//
// Per segment: COUNT(*), SUM(CRC32(digest)) (docs/design.md §5's sum(crc32)) and
// BIT_XOR of the first 64 bits of MD5(digest). CRC32 alone lets one changed
// row in 2^32 through, and a sum can be balanced by a second change; the
// 64-bit XOR costs one more hash per row and makes either vanishingly
// unlikely.
type Checksummer struct {
	src, dst       *table
	srcDB, dstDB   *sql.DB
	filter         *ShardFilter
	segmentRows    int
	recheckDelay   time.Duration
	rechecks       int
	limiter        *ratelimit.Limiter
	settle         func(context.Context, binlog.Position) error
	sumCols, pkSQL string
	onCompare      func(attempt int) // tests: runs after each read of a segment
}

// ChecksumOption customises NewChecksummer.
type ChecksumOption func(*Checksummer)

// DefaultSegmentRows is a segment's size: one aggregate reads this many
// rows per side (milliseconds), and a repair re-copies at most about this
// many.
const DefaultSegmentRows = 1000

// WithSegmentRows sets the rows per segment (default DefaultSegmentRows).
func WithSegmentRows(n int) ChecksumOption {
	return func(c *Checksummer) {
		if n > 0 {
			c.segmentRows = n
		}
	}
}

// WithRecheck sets how often a differing segment or row is read again and
// the first delay (doubled for each further recheck). Default: 3 rechecks
// from 200 ms, 1.4 s in all, longer than a dual-write or a binlog event
// takes to reach the target when the system is healthy.
func WithRecheck(times int, delay time.Duration) ChecksumOption {
	return func(c *Checksummer) { c.rechecks, c.recheckDelay = max(0, times), delay }
}

// WithSettledRecheck adds a last recheck for a segment that still differs
// after the others, for a target written only by a binlog applier (the job
// before its switch): the source's rows of the segment are read with a
// locking read (LOCK IN SHARE MODE: writers of those rows and inserts into
// the key range wait), then settle is called with the source's binlog
// position and must return once the applier has applied everything up to
// it, then the target is read and the lock released. Nothing of the segment
// is in flight then, so a difference is real. Without it a segment that is
// written faster than the rechecks' delays (im_conv_seq of busy
// conversations) never compares equal. The lock is held for the apply lag
// (milliseconds when caught up); bound settle with a timeout.
func WithSettledRecheck(settle func(ctx context.Context, applied binlog.Position) error) ChecksumOption {
	return func(c *Checksummer) { c.settle = settle }
}

// WithChecksumLimiter throttles the rows read per side (default unlimited).
func WithChecksumLimiter(l *ratelimit.Limiter) ChecksumOption {
	return func(c *Checksummer) { c.limiter = l }
}

// NewChecksummer checks that both tables have the same shape and returns a
// checksummer for filter's shard (nil: every row).
func NewChecksummer(ctx context.Context, src, dst Side, filter *ShardFilter, opts ...ChecksumOption) (*Checksummer, error) {
	st, dt, err := loadPair(ctx, src, dst, filter)
	if err != nil {
		return nil, err
	}
	c := &Checksummer{src: st, dst: dt, srcDB: src.DB, dstDB: dst.DB, filter: filter,
		segmentRows: DefaultSegmentRows, rechecks: 3, recheckDelay: 200 * time.Millisecond}
	for _, o := range opts {
		o(c)
	}
	d := rowDigest(st)
	c.sumCols = "COUNT(*), COALESCE(SUM(CRC32(" + d + ")), 0), " +
		"COALESCE(BIT_XOR(CAST(CONV(LEFT(MD5(" + d + "), 16), 16, 10) AS UNSIGNED)), 0)"
	c.pkSQL = st.pkList()
	return c, nil
}

// rowDigest is the exact text of a row (see Checksummer).
func rowDigest(t *table) string {
	var parts, nulls []string
	for _, c := range t.Columns {
		q := sqlq.Ident(c.Name)
		switch {
		case c.Integer(), c.DataType == "decimal", c.DataType == "double":
			parts = append(parts, q)
		case c.DataType == "float":
			parts = append(parts, "CAST("+q+" AS DOUBLE)")
		case c.DataType == "bit":
			parts = append(parts, "CAST("+q+" AS UNSIGNED)")
		case c.DataType == "date", c.DataType == "datetime", c.DataType == "timestamp", c.DataType == "time", c.DataType == "year":
			parts = append(parts, q)
		default:
			parts = append(parts, "MD5("+q+")")
		}
		if c.Nullable {
			nulls = append(nulls, "ISNULL("+q+")")
		}
	}
	if len(nulls) > 0 {
		parts = append(parts, "CONCAT("+strings.Join(nulls, ", ")+")")
	}
	return "CONCAT_WS('#', " + strings.Join(parts, ", ") + ")"
}

// Segment is a primary-key range (After, Upto]. JSON-serialisable.
type Segment struct {
	After Key `json:"after,omitempty"` // exclusive; nil: from the first row
	Upto  Key `json:"upto,omitempty"`  // inclusive; nil: through the last row
}

func (s Segment) String() string {
	lo, hi := "-inf", "+inf"
	if s.After != nil {
		lo = s.After.String()
	}
	if s.Upto != nil {
		hi = s.Upto.String()
	}
	return "(" + lo + ", " + hi + "]"
}

// Sum is one side's aggregate over a segment.
type Sum struct {
	Rows int64
	CRC  string // SUM(CRC32(digest)), a DECIMAL's text
	Hash uint64 // BIT_XOR of 64 bits of MD5(digest)
}

// SegmentResult is the comparison of one segment.
type SegmentResult struct {
	Segment
	Source, Target Sum
	Equal          bool
	Rechecks       int // how many times it was read again before the verdict
}

// ChecksumState is how far a checksum run has come and what it found; the
// job stores it (JSON) to resume, and the final one is the report.
type ChecksumState struct {
	After      Key       `json:"after,omitempty"` // Upto of the last segment compared
	Segments   int64     `json:"segments"`
	SourceRows int64     `json:"source_rows"` // sums of per-segment counts, each
	TargetRows int64     `json:"target_rows"` // read at its own moment
	Differing  []Segment `json:"differing,omitempty"`
	Done       bool      `json:"done,omitempty"`
	// Sampled is set once the job compared sampled rows column by column
	// after equal segments (Sample); SampleDiffs names the rows that
	// still differed.
	Sampled     bool     `json:"sampled,omitempty"`
	SampleDiffs []string `json:"sample_diffs,omitempty"`
}

// Equal reports a finished run that found no difference.
func (s ChecksumState) Equal() bool { return s.Done && len(s.Differing) == 0 }

// Run compares the segments after from.After, calling save with the new
// state after each one (a save error stops the run).
func (c *Checksummer) Run(ctx context.Context, from ChecksumState, save func(ChecksumState) error) (ChecksumState, error) {
	if from.Done {
		return from, nil
	}
	sc, dc, release, err := c.conns(ctx)
	if err != nil {
		return from, err
	}
	defer release()
	st := from
	st.Differing = append([]Segment(nil), from.Differing...)
	for !st.Done {
		upto, err := c.boundary(ctx, sc, st.After)
		if err != nil {
			return st, err
		}
		res, err := c.compare(ctx, sc, dc, Segment{After: st.After, Upto: upto})
		if err != nil {
			return st, err
		}
		st.Segments++
		st.SourceRows += res.Source.Rows
		st.TargetRows += res.Target.Rows
		if !res.Equal {
			st.Differing = append(st.Differing, res.Segment)
		}
		st.After, st.Done = upto, upto == nil
		if save != nil {
			if err := save(st); err != nil {
				return st, fmt.Errorf("migrate: save checksum state: %w", err)
			}
		}
	}
	return st, nil
}

// CompareSegment compares one segment, with rechecks; the job uses it to
// confirm a repair.
func (c *Checksummer) CompareSegment(ctx context.Context, seg Segment) (SegmentResult, error) {
	sc, dc, release, err := c.conns(ctx)
	if err != nil {
		return SegmentResult{}, err
	}
	defer release()
	return c.compare(ctx, sc, dc, seg)
}

// conns takes a session connection on each side; release drops both.
func (c *Checksummer) conns(ctx context.Context) (sc, dc *sql.Conn, release func(), err error) {
	sc, err = sessionConn(ctx, c.srcDB)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("migrate: source %s: %w", c.src.qualified(), err)
	}
	dc, err = sessionConn(ctx, c.dstDB)
	if err != nil {
		discard(sc)
		return nil, nil, nil, fmt.Errorf("migrate: target %s: %w", c.dst.qualified(), err)
	}
	return sc, dc, func() { discard(sc); discard(dc) }, nil
}

// boundary is the key of the segmentRows-th source row after after, or nil
// when fewer rows are left (the segment is the last one).
func (c *Checksummer) boundary(ctx context.Context, q queryer, after Key) (Key, error) {
	w, err := segmentWhere(c.src, c.filter, after, nil)
	if err != nil {
		return nil, err
	}
	pk := make([]any, len(c.src.PK))
	ptrs := make([]any, len(pk))
	for i := range pk {
		ptrs[i] = &pk[i]
	}
	err = q.QueryRowContext(ctx, selectSQL(c.src, c.pkSQL, w, " LIMIT 1 OFFSET ?"), append(w.args, c.segmentRows-1)...).Scan(ptrs...)
	if err == sql.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("migrate: segment boundary in %s: %w", c.src.qualified(), err)
	}
	return pkKey(pk)
}

// compare reads both sides' sums, rechecking a difference.
func (c *Checksummer) compare(ctx context.Context, sq *sql.Conn, dq queryer, seg Segment) (SegmentResult, error) {
	delay := c.recheckDelay
	for attempt := 0; ; attempt++ {
		if c.limiter != nil {
			if err := c.limiter.Wait(ctx, c.segmentRows); err != nil {
				return SegmentResult{}, err
			}
		}
		var s, d Sum
		var serr, derr error
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); s, serr = c.sum(ctx, sq, c.src, seg) }()
		d, derr = c.sum(ctx, dq, c.dst, seg)
		wg.Wait()
		if serr != nil {
			return SegmentResult{}, serr
		}
		if derr != nil {
			return SegmentResult{}, derr
		}
		if c.onCompare != nil {
			c.onCompare(attempt)
		}
		res := SegmentResult{Segment: seg, Source: s, Target: d, Equal: s == d, Rechecks: attempt}
		if !res.Equal && attempt >= c.rechecks && c.settle != nil {
			return c.settled(ctx, sq, dq, seg, attempt+1)
		}
		if res.Equal || attempt >= c.rechecks {
			return res, nil
		}
		if err := sleep(ctx, delay); err != nil {
			return res, err
		}
		delay *= 2
	}
}

// settledAttempts bounds the settled recheck's retries after a deadlock
// or lock wait timeout with the source's writers.
const settledAttempts = 3

// settled is the recheck of WithSettledRecheck.
func (c *Checksummer) settled(ctx context.Context, sq *sql.Conn, dq queryer, seg Segment, attempt int) (SegmentResult, error) {
	for try := 1; ; try++ {
		res, err := c.settledOnce(ctx, sq, dq, seg)
		res.Rechecks = attempt
		if err == nil || !retryable(err) || try == settledAttempts {
			return res, err
		}
	}
}

func (c *Checksummer) settledOnce(ctx context.Context, sq *sql.Conn, dq queryer, seg Segment) (SegmentResult, error) {
	tx, err := sq.BeginTx(ctx, nil)
	if err != nil {
		return SegmentResult{}, err
	}
	defer tx.Rollback() // read only: ending it releases the locks
	s, err := c.sumSQL(ctx, tx, c.src, seg, " LOCK IN SHARE MODE")
	if err != nil {
		return SegmentResult{}, err
	}
	pos, err := binlog.CurrentPosition(ctx, tx)
	if err != nil {
		return SegmentResult{}, fmt.Errorf("migrate: source binlog position: %w", err)
	}
	if err := c.settle(ctx, pos); err != nil {
		return SegmentResult{}, fmt.Errorf("migrate: settled recheck of %s %s: %w", c.dst.qualified(), seg, err)
	}
	d, err := c.sum(ctx, dq, c.dst, seg)
	if err != nil {
		return SegmentResult{}, err
	}
	return SegmentResult{Segment: seg, Source: s, Target: d, Equal: s == d}, nil
}

func (c *Checksummer) sum(ctx context.Context, q queryer, t *table, seg Segment) (Sum, error) {
	return c.sumSQL(ctx, q, t, seg, "")
}

// sumSQL reads a segment's aggregate; suffix is a locking clause or "".
func (c *Checksummer) sumSQL(ctx context.Context, q queryer, t *table, seg Segment, suffix string) (Sum, error) {
	w, err := segmentWhere(t, c.filter, seg.After, seg.Upto)
	if err != nil {
		return Sum{}, err
	}
	var s Sum
	if err := q.QueryRowContext(ctx, "SELECT "+c.sumCols+" FROM "+t.qualified()+w.String()+suffix, w.args...).Scan(&s.Rows, &s.CRC, &s.Hash); err != nil {
		return Sum{}, fmt.Errorf("migrate: checksum %s %s: %w", t.qualified(), seg, err)
	}
	return s, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ---- sampled rows --------------------------------------------------------

// RowDiff is a sampled row that differs after the rechecks.
type RowDiff struct {
	Key     Key
	Missing bool     // on the source, not on the target
	Extra   bool     // on the target, gone from the source
	Columns []string // the columns whose values differ
}

// SampleResult is the outcome of Sample.
type SampleResult struct {
	Compared int
	Diffs    []RowDiff
}

// Sample compares up to n source rows of the shard, drawn uniformly at
// random, with the target's rows of the same keys, column by column. A row
// that differs is read again on both sides after the recheck delays before
// it is reported. Its cost is a pass over the shard's keys in short
// statements (like a checksum pass on the source alone) plus n row reads.
func (c *Checksummer) Sample(ctx context.Context, n int) (SampleResult, error) {
	var res SampleResult
	if n <= 0 {
		return res, nil
	}
	sc, dc, release, err := c.conns(ctx)
	if err != nil {
		return res, err
	}
	defer release()
	rows, err := c.pick(ctx, sc, n)
	if err != nil {
		return res, err
	}
	res.Compared = len(rows)
	type suspect struct {
		key      Key
		src, dst []any
	}
	var suspects []suspect
	for _, r := range rows {
		k, err := c.src.keyOf(r)
		if err != nil {
			return res, err
		}
		d, err := c.rowByKey(ctx, dc, c.dst, k)
		if err != nil {
			return res, err
		}
		if diffColumns(c.src, r, d) != nil {
			suspects = append(suspects, suspect{k, r, d})
		}
	}
	delay := c.recheckDelay
	for attempt := 0; attempt < c.rechecks && len(suspects) > 0; attempt++ {
		if err := sleep(ctx, delay); err != nil {
			return res, err
		}
		delay *= 2
		still := suspects[:0]
		for _, s := range suspects {
			if s.src, err = c.rowByKey(ctx, sc, c.src, s.key); err != nil {
				return res, err
			}
			if s.dst, err = c.rowByKey(ctx, dc, c.dst, s.key); err != nil {
				return res, err
			}
			if diffColumns(c.src, s.src, s.dst) != nil {
				still = append(still, s)
			}
		}
		suspects = still
	}
	if c.settle != nil {
		// A row written all the time (a busy conversation's im_conv_seq
		// counter) differs at every plain read while the apply trails by
		// milliseconds: read it once more with the source's row locked
		// until the apply has passed the source's position.
		still := suspects[:0]
		for _, s := range suspects {
			if s.src, s.dst, err = c.settledRow(ctx, sc, dc, s.key); err != nil {
				return res, err
			}
			if diffColumns(c.src, s.src, s.dst) != nil {
				still = append(still, s)
			}
		}
		suspects = still
	}
	for _, s := range suspects {
		res.Diffs = append(res.Diffs, RowDiff{Key: s.key, Missing: s.dst == nil, Extra: s.src == nil,
			Columns: diffColumns(c.src, s.src, s.dst)})
	}
	return res, nil
}

// String says how the row differs, for last_error.
func (d RowDiff) String() string {
	switch {
	case d.Missing:
		return d.Key.String() + " missing on the target"
	case d.Extra:
		return d.Key.String() + " on the target only"
	}
	return d.Key.String() + " differs in " + strings.Join(d.Columns, ", ")
}

// diffColumns names the columns that differ between two rows; nil when
// they are equal (both absent counts as equal), every column when one is
// absent.
func diffColumns(t *table, a, b []any) []string {
	if a == nil && b == nil {
		return nil
	}
	var out []string
	for i, col := range t.Columns {
		if a == nil || b == nil || !sameValue(a[i], b[i]) {
			out = append(out, col.Name)
		}
	}
	return out
}

// rowByKey reads one row by primary key; nil when there is none.
// settledRow reads the source's row k locked in share mode, waits until
// the apply has reached the source's position, and reads the target's.
func (c *Checksummer) settledRow(ctx context.Context, sc *sql.Conn, dc queryer, k Key) (src, dst []any, err error) {
	for try := 1; ; try++ {
		src, dst, err = c.settledRowOnce(ctx, sc, dc, k)
		if err == nil || !retryable(err) || try == settledAttempts {
			return src, dst, err
		}
	}
}

func (c *Checksummer) settledRowOnce(ctx context.Context, sc *sql.Conn, dc queryer, k Key) (src, dst []any, err error) {
	tx, err := sc.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	defer tx.Rollback() // read only: ending it releases the lock
	w := &where{}
	if err := w.keyEquals(c.src, k); err != nil {
		return nil, nil, err
	}
	rows, err := readRows(ctx, tx, selectSQL(c.src, c.src.columnList(), w, " LOCK IN SHARE MODE"), w.args, len(c.src.Columns))
	if err != nil {
		return nil, nil, fmt.Errorf("migrate: read %s row %s: %w", c.src.qualified(), k, err)
	}
	if len(rows) > 0 {
		src = rows[0]
	}
	pos, err := binlog.CurrentPosition(ctx, tx)
	if err != nil {
		return nil, nil, fmt.Errorf("migrate: source binlog position: %w", err)
	}
	if err := c.settle(ctx, pos); err != nil {
		return nil, nil, fmt.Errorf("migrate: settled recheck of %s row %s: %w", c.dst.qualified(), k, err)
	}
	dst, err = c.rowByKey(ctx, dc, c.dst, k)
	return src, dst, err
}

func (c *Checksummer) rowByKey(ctx context.Context, q queryer, t *table, k Key) ([]any, error) {
	w := &where{}
	if err := w.keyEquals(t, k); err != nil {
		return nil, err
	}
	rows, err := readRows(ctx, q, selectSQL(t, t.columnList(), w, ""), w.args, len(t.Columns))
	if err != nil {
		return nil, fmt.Errorf("migrate: read %s row %s: %w", t.qualified(), k, err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return rows[0], nil
}

// pick returns up to n distinct source rows of the shard, drawn uniformly.
// A pass over the shard's segment boundaries (the boundary queries of Run:
// short statements reading keys) numbers the rows; then each drawn number
// is read as OFFSET within its segment. Drawing key values at random and
// taking the next row would be cheaper but is biased by the gaps between
// keys: with one outlier key (2^64-1) nearly every probe lands on it.
func (c *Checksummer) pick(ctx context.Context, q queryer, n int) ([][]any, error) {
	var bounds []Key // segment i is (bounds[i-1], bounds[i]]; the last one is open above
	var after Key
	for {
		k, err := c.boundary(ctx, q, after)
		if err != nil {
			return nil, err
		}
		if k == nil {
			break
		}
		bounds = append(bounds, k)
		after = k
	}
	w, err := segmentWhere(c.src, c.filter, after, nil)
	if err != nil {
		return nil, err
	}
	var tail int64
	if err := q.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+c.src.qualified()+w.String(), w.args...).Scan(&tail); err != nil {
		return nil, fmt.Errorf("migrate: count %s: %w", c.src.qualified(), err)
	}
	seg := int64(c.segmentRows)
	total := int64(len(bounds))*seg + tail
	var draws []int64
	if int64(n) >= total {
		for i := int64(0); i < total; i++ {
			draws = append(draws, i)
		}
	} else {
		seen := map[int64]bool{}
		for len(draws) < n {
			if i := rand.Int64N(total); !seen[i] {
				seen[i] = true
				draws = append(draws, i)
			}
		}
	}
	var out [][]any
	for _, i := range draws {
		var from Key
		if s := i / seg; s > 0 {
			from = bounds[s-1]
		}
		w, err := segmentWhere(c.src, c.filter, from, nil)
		if err != nil {
			return nil, err
		}
		rows, err := readRows(ctx, q, selectSQL(c.src, c.src.columnList(), w, " LIMIT 1 OFFSET ?"), append(w.args, i%seg), len(c.src.Columns))
		if err != nil {
			return nil, fmt.Errorf("migrate: sample %s: %w", c.src.qualified(), err)
		}
		out = append(out, rows...) // none if the row went meanwhile
	}
	return out, nil
}
