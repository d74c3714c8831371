package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ErrNoBinlog: the source has no binary log, so no position can be paired
// with a snapshot and the copy could never be caught up.
var ErrNoBinlog = errors.New("migrate: the source server has no binary log (log_bin is off)")

// BinlogPosition is where in the source's binary log a consistent snapshot
// stands: every transaction committed before it is in the snapshot, none
// after it. File and Pos are the classic coordinates; GTID is the same point
// as a MariaDB GTID position ("0-1-42", several domains comma-separated),
// what a MariaDB GTID replication stream (go-mysql's BinlogSyncer) starts
// from. GTID is empty when nothing has been logged with a GTID yet; a stream
// then starts at the first binary log file.
type BinlogPosition struct {
	File     string `json:"file"`
	Pos      uint64 `json:"pos"`
	GTID     string `json:"gtid"`
	ServerID uint64 `json:"server_id"`
}

func (p BinlogPosition) String() string {
	return fmt.Sprintf("%s:%d (gtid %q, server %d)", p.File, p.Pos, p.GTID, p.ServerID)
}

// Snapshot is a read-only REPEATABLE READ transaction opened WITH
// CONSISTENT SNAPSHOT on one connection of the source, and the binlog
// position it corresponds to. MariaDB takes the InnoDB read view and the
// binlog coordinates under one lock, so Binlog_snapshot_file/position are
// exactly the snapshot's point, not "roughly when it started".
//
// A Snapshot is used by one goroutine at a time. Close it when done; a
// cancelled context in the middle of a read breaks its connection, and the
// caller then opens a new Snapshot.
type Snapshot struct {
	conn     *sql.Conn
	Position BinlogPosition
	Started  time.Time
}

// OpenSnapshot starts a consistent snapshot on a connection of src (taken
// out of the pool for the snapshot's life) and reads its binlog position.
func OpenSnapshot(ctx context.Context, src *sql.DB) (*Snapshot, error) {
	conn, err := sessionConn(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("migrate: snapshot: %w", err)
	}
	s, err := startSnapshot(ctx, conn)
	if err != nil {
		discard(conn)
		return nil, fmt.Errorf("migrate: snapshot: %w", err)
	}
	return s, nil
}

func startSnapshot(ctx context.Context, conn *sql.Conn) (*Snapshot, error) {
	if _, err := conn.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		return nil, err
	}
	started := time.Now()
	if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return nil, err
	}
	s := &Snapshot{conn: conn, Started: started}
	rows, err := conn.QueryContext(ctx, "SHOW SESSION STATUS LIKE 'binlog_snapshot_%'")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return nil, err
		}
		switch name {
		case "Binlog_snapshot_file":
			s.Position.File = value
		case "Binlog_snapshot_position":
			if _, err := fmt.Sscan(value, &s.Position.Pos); err != nil {
				return nil, fmt.Errorf("Binlog_snapshot_position %q: %w", value, err)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if s.Position.File == "" {
		return nil, ErrNoBinlog
	}
	var gtid sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, ?)", s.Position.File, s.Position.Pos).Scan(&gtid); err != nil {
		return nil, err
	}
	if !gtid.Valid {
		return nil, fmt.Errorf("BINLOG_GTID_POS(%q, %d) is NULL: the file is gone or the position is not a transaction boundary",
			s.Position.File, s.Position.Pos)
	}
	s.Position.GTID = gtid.String
	if s.Position.ServerID, err = serverID(ctx, conn); err != nil {
		return nil, err
	}
	return s, nil
}

// Age is how long the snapshot's read view has been held open. InnoDB keeps
// every row version younger than it (the purge lag grows with the write
// rate), so long copies rotate snapshots (WithSnapshotMaxAge).
func (s *Snapshot) Age() time.Duration { return time.Since(s.Started) }

// Close ends the transaction and drops the connection.
func (s *Snapshot) Close() {
	if s.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, _ = s.conn.ExecContext(ctx, "ROLLBACK")
	cancel()
	discard(s.conn)
	s.conn = nil
}
