package binlog

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Position is a MariaDB GTID position: the last transaction seen in each
// replication domain, "domain-server-seq" joined by commas ("0-1-42" or
// "0-1-42,1-2-7"); "" means "before anything", i.e. from the oldest binlog
// the server still has. It is MariaDB's own slave_connect_state /
// gtid_slave_pos format, so a position can be stored as text (an etcd
// checkpoint) and handed back to Stream, or to MASTER_GTID_WAIT, unchanged.
// Positions this package returns are normalised (one GTID per domain,
// ordered by domain), so two equal positions are equal strings.
type Position string

// gtid is one "domain-server-seq" triple.
type gtid struct {
	domain, server uint32
	seq            uint64
}

func (g gtid) String() string {
	return strconv.FormatUint(uint64(g.domain), 10) + "-" +
		strconv.FormatUint(uint64(g.server), 10) + "-" +
		strconv.FormatUint(g.seq, 10)
}

func parseGTID(s string) (gtid, error) {
	parts := strings.Split(strings.TrimSpace(s), "-")
	if len(parts) != 3 {
		return gtid{}, fmt.Errorf("binlog: GTID %q is not domain-server-seq", s)
	}
	d, err1 := strconv.ParseUint(parts[0], 10, 32)
	sv, err2 := strconv.ParseUint(parts[1], 10, 32)
	n, err3 := strconv.ParseUint(parts[2], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return gtid{}, fmt.Errorf("binlog: GTID %q is not domain-server-seq: %v", s, err)
	}
	return gtid{domain: uint32(d), server: uint32(sv), seq: n}, nil
}

// gtidPos is a parsed Position: at most one GTID per domain, kept sorted by
// domain. A slice, not a map: servers have one domain or a handful.
type gtidPos []gtid

func parsePos(p Position) (gtidPos, error) {
	var out gtidPos
	if strings.TrimSpace(string(p)) == "" {
		return out, nil
	}
	for _, s := range strings.Split(string(p), ",") {
		g, err := parseGTID(s)
		if err != nil {
			return nil, err
		}
		if _, ok := out.find(g.domain); ok {
			// MariaDB refuses such a position too (one GTID per domain).
			return nil, fmt.Errorf("binlog: position %q names domain %d twice", p, g.domain)
		}
		out = out.with(g)
	}
	return out, nil
}

func (p gtidPos) find(domain uint32) (int, bool) {
	return slices.BinarySearchFunc(p, domain, func(g gtid, d uint32) int {
		switch {
		case g.domain < d:
			return -1
		case g.domain > d:
			return 1
		}
		return 0
	})
}

// with returns p with g as its domain's GTID (a transaction of that domain
// has been read to its end). It may reuse p's array: callers own p.
func (p gtidPos) with(g gtid) gtidPos {
	i, ok := p.find(g.domain)
	if ok {
		p[i] = g
		return p
	}
	return slices.Insert(p, i, g)
}

func (p gtidPos) Position() Position {
	var b strings.Builder
	for i, g := range p {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(g.String())
	}
	return Position(b.String())
}

// ParsePosition checks a position given by a person or read from storage
// and returns it normalised (ordered by domain, spaces dropped), so a bad
// checkpoint fails here with its text rather than as a server error later.
func ParsePosition(s string) (Position, error) {
	p, err := parsePos(Position(s))
	if err != nil {
		return "", err
	}
	return p.Position(), nil
}

// Reached reports whether p is at or past target in every domain target
// names: a stream whose Stats().Position has reached the server's
// CurrentPosition has read everything committed before that was asked.
// Sequence numbers grow per domain on one primary (gtid_strict_mode), so
// comparing them, not server ids, is what "past" means.
func (p Position) Reached(target Position) (bool, error) {
	have, err := parsePos(p)
	if err != nil {
		return false, err
	}
	want, err := parsePos(target)
	if err != nil {
		return false, err
	}
	for _, w := range want {
		i, ok := have.find(w.domain)
		if !ok || have[i].seq < w.seq {
			return false, nil
		}
	}
	return true, nil
}

// Querier is what CurrentPosition needs: *sql.DB, *sql.Conn and *sql.Tx all
// have it.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// CurrentPosition returns the server's @@gtid_binlog_pos: the last GTID
// written to its binlog per domain. Not gtid_current_pos, which on a
// replica also counts transactions it applied without logging them: a
// binlog reader can only ever reach what is in the binlog. A stream whose
// position has Reached this value has caught up with the moment of the call.
func CurrentPosition(ctx context.Context, q Querier) (Position, error) {
	var s string
	if err := q.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&s); err != nil {
		return "", fmt.Errorf("binlog: read @@gtid_binlog_pos: %w", err)
	}
	return ParsePosition(s)
}

// SnapshotPosition opens a consistent, read-only snapshot transaction on
// conn and returns the binlog position consistent with it: the snapshot
// sees exactly the transactions up to the position, and Stream from the
// position delivers exactly the ones after it. Reading a table in the
// snapshot and then applying the stream from the position therefore
// rebuilds the table without a gap or an overlap, with no lock taken on the
// server (MariaDB records the binlog offset with the snapshot:
// Binlog_snapshot_file / Binlog_snapshot_position; BINLOG_GTID_POS turns it
// into a GTID position).
//
// The transaction stays open on conn: the caller reads in it with conn and
// ends it with conn.ExecContext(ctx, "COMMIT") (or ROLLBACK). database/sql
// does not know a transaction is open on conn, so do not return conn to the
// pool before that. On error the transaction is rolled back.
func SnapshotPosition(ctx context.Context, conn *sql.Conn) (Position, error) {
	// REPEATABLE READ is what makes the snapshot last for the whole
	// transaction; under READ COMMITTED every statement would see a newer
	// view than the position. SET TRANSACTION applies to the next
	// transaction only, so the session's own level is left alone.
	if _, err := conn.ExecContext(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		return "", fmt.Errorf("binlog: snapshot: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return "", fmt.Errorf("binlog: snapshot: %w", err)
	}
	pos, err := snapshotPosition(ctx, conn)
	if err != nil {
		// The context may be the reason; roll back regardless of it.
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return "", err
	}
	return pos, nil
}

func snapshotPosition(ctx context.Context, conn *sql.Conn) (Position, error) {
	at, err := snapshotOffset(ctx, conn)
	if err != nil {
		return "", err
	}
	file, offset := at.File, strconv.FormatUint(at.Offset, 10)
	var gtids sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, ?)", file, offset).Scan(&gtids); err != nil {
		return "", fmt.Errorf("binlog: BINLOG_GTID_POS(%s, %s): %w", file, offset, err)
	}
	if !gtids.Valid {
		return "", fmt.Errorf("binlog: BINLOG_GTID_POS(%s, %s) is NULL: the file is no longer in the server's binlog index", file, offset)
	}
	return ParsePosition(gtids.String)
}

// snapshotOffset is the binlog offset of the consistent snapshot open on
// conn.
func snapshotOffset(ctx context.Context, conn *sql.Conn) (FileOffset, error) {
	rows, err := conn.QueryContext(ctx, "SHOW STATUS LIKE 'binlog_snapshot_%'")
	if err != nil {
		return FileOffset{}, fmt.Errorf("binlog: snapshot position: %w", err)
	}
	var at FileOffset
	var offset string
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			rows.Close()
			return FileOffset{}, fmt.Errorf("binlog: snapshot position: %w", err)
		}
		switch strings.ToLower(name) {
		case "binlog_snapshot_file":
			at.File = value
		case "binlog_snapshot_position":
			offset = value
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return FileOffset{}, fmt.Errorf("binlog: snapshot position: %w", err)
	}
	if at.File == "" || offset == "" {
		return FileOffset{}, fmt.Errorf("%w: the server reports no binlog snapshot position (is log_bin ON?)", ErrServerConfig)
	}
	if at.Offset, err = strconv.ParseUint(offset, 10, 64); err != nil {
		return FileOffset{}, fmt.Errorf("binlog: Binlog_snapshot_position %q: %w", offset, err)
	}
	return at, nil
}

// FileOffset is a point in one server's binary log as a file and a byte
// offset in it: what MariaDB reports for a consistent snapshot
// (Binlog_snapshot_file / Binlog_snapshot_position) at no cost, where the
// same point as a GTID Position (BINLOG_GTID_POS) costs a read of the file
// from its start.
type FileOffset struct {
	File   string `json:"file"`
	Offset uint64 `json:"offset"`
}

func (p FileOffset) String() string { return p.File + ":" + strconv.FormatUint(p.Offset, 10) }

// compare orders two points of one server's binary log: files by the
// sequence number MariaDB appends to the base name (binlog.000009 before
// binlog.000010, and before binlog.1000000 once the six digits run out),
// then offsets. Two base names are two logs: not comparable.
func (p FileOffset) compare(q FileOffset) (int, error) {
	pb, pn, err1 := splitLogName(p.File)
	qb, qn, err2 := splitLogName(q.File)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	if pb != qb {
		return 0, fmt.Errorf("binlog: %s and %s are points in two different binary logs", p, q)
	}
	if c := cmp.Compare(pn, qn); c != 0 {
		return c, nil
	}
	return cmp.Compare(p.Offset, q.Offset), nil
}

func splitLogName(name string) (base string, seq uint64, err error) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return "", 0, fmt.Errorf("binlog: log file name %q has no sequence number", name)
	}
	seq, err = strconv.ParseUint(name[i+1:], 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("binlog: log file name %q has no sequence number", name)
	}
	return name[:i], seq, nil
}

// snapshotRetry bounds the pause between two snapshots that do not cover
// the transaction yet: the gap is the server's commit of a group already in
// the binary log, microseconds normally, longer on a starved CPU.
const snapshotRetry = 20 * time.Millisecond

// snapshotStatementTimeout bounds one statement of SnapshotCovering.
const snapshotStatementTimeout = 10 * time.Second

// snapshotAttempt opens the snapshot and reads its binlog offset.
func snapshotAttempt(ctx context.Context, conn *sql.Conn) (FileOffset, error) {
	if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return FileOffset{}, fmt.Errorf("binlog: snapshot: %w", err)
	}
	return snapshotOffset(ctx, conn)
}

// SnapshotCovering opens a consistent, read-only snapshot transaction on
// conn that sees the transaction ending at end (a delivered Txn.End) and
// every one before it in the binary log. A snapshot right after the
// transaction was streamed may not: MariaDB's group commit writes a group
// to the binary log and wakes the replication connections before the
// storage engine commits it (commit_ordered comes last), so a reader that
// reacts to a streamed transaction at once can find the server not showing
// it yet. A snapshot records the binlog offset it is consistent with; one
// short of end is rolled back and taken again until ctx ends.
//
// end must come from a stream of the server conn is connected to (the
// offsets of two servers do not compare; two base names are an error).
// As with SnapshotPosition the transaction stays open on conn: read in it
// and end it with COMMIT. Under REPEATABLE READ every read in it sees the
// snapshot; under READ COMMITTED each read sees a newer view, which still
// includes end.
//
// ctx is checked between attempts, not inside a statement: a deadline that
// ran out mid-statement would make the driver drop conn, whose owner may
// go on using it (each statement is bounded by snapshotStatementTimeout).
func SnapshotCovering(ctx context.Context, conn *sql.Conn, end FileOffset) error {
	for wait := 250 * time.Microsecond; ; wait = min(2*wait, snapshotRetry) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("binlog: the server's snapshots stay before the streamed transaction ending at %s: %w", end, err)
		}
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotStatementTimeout)
		at, err := snapshotAttempt(qctx, conn)
		cancel()
		c := 0
		if err == nil {
			c, err = at.compare(end)
		}
		if err == nil && c >= 0 {
			return nil
		}
		// Whatever the attempt opened goes, whatever made it fail.
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		if err != nil {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("binlog: the server's snapshots stay at %s, before the streamed transaction ending at %s: %w", at, end, ctx.Err())
		case <-t.C:
		}
	}
}
