// Package binlog reads committed row changes from a MariaDB server's binary
// log, one transaction at a time, resumable from a GTID position. It is
// what online shard migration applies to the new side after copying a
// snapshot, and what a search indexer or an archiver can follow later.
//
// The reader is go-mysql's replication.BinlogSyncer (a raw replica
// connection), not its canal package: canal adds a mysqldump phase, its own
// schema tracking from information_schema and an event-at-a-time handler,
// where a consumer here needs whole transactions and exact control of the
// resume position. Column names, signedness and primary keys come from the
// TABLE_MAP events themselves (binlog_row_metadata=FULL), so every row is
// mapped with the columns it was written with, across ALTER TABLEs.
//
// Guarantees: a transaction is delivered only after its commit event was
// read, whole, in commit order, at most once per Stream call; a lost
// connection discards the partial transaction and resumes after the last
// transaction read to its end. A consumer that stores Txn.Next together
// with (or after) applying a Txn, and restarts Stream from it, sees every
// transaction exactly once.
package binlog

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"go.uber.org/zap"
)

// Errors Stream returns instead of retrying: retrying would not help.
var (
	// ErrServerConfig: the server (or a session on it) logs in a way that
	// cannot be read as whole rows with names. The message says what to set.
	ErrServerConfig = errors.New("binlog: server configuration")
	// ErrPositionUnavailable: the server cannot stream from the position:
	// its binlogs from there were purged (the consumer must start again
	// from a new snapshot), or the position is ahead of the server (another
	// server's position, or a reset binlog).
	ErrPositionUnavailable = errors.New("binlog: position not available on the server")
	// ErrTxnTooLarge: one transaction has more filtered changes than
	// Config.MaxTxnChanges; raise it if the memory is there.
	ErrTxnTooLarge = errors.New("binlog: transaction too large")
	// ErrUnsupported: a transaction of a kind whose rows cannot be read as a
	// plain commit (an XA transaction, a rolled-back transaction that
	// logged non-transactional rows) touched a filtered table.
	ErrUnsupported = errors.New("binlog: unsupported transaction")
)

// DefaultMaxTxnChanges bounds the filtered changes buffered for one
// transaction: about 40 MB of IM rows. An IM transaction (a message, its
// seq, an inbox fan-out to a large group) is far smaller; a bulk UPDATE
// that is larger should fail loudly, not take the process's memory.
const DefaultMaxTxnChanges = 100_000

const (
	// A server that is down is retried from minBackoff doubling up to
	// maxBackoff: a restarted mysqld is picked up within a few seconds,
	// one that stays down costs a connection attempt every 5 s.
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
	// The server sends a heartbeat after heartbeatPeriod without events, so
	// a read that sees nothing for readTimeout means a dead peer (a
	// partition, not a restart, which closes the socket). readTimeout also
	// bounds how long fn may take: the connection's reader is idle
	// meanwhile, and a longer fn costs a reconnect (nothing is lost).
	heartbeatPeriod = time.Second
	readTimeout     = 30 * time.Second
	// eventBuffer is how many decoded events go-mysql reads ahead of the
	// consumer (rows events are at most ~8 KiB by default).
	eventBuffer = 1024
	// A connection that read a transaction or lasted healthySession
	// restarts the back-off; one that fails at once (a server that accepts
	// and drops) keeps growing it.
	healthySession = 10 * time.Second
	// MariaDB GTID event flags go-mysql has no names for.
	flPreparedXA  = 64
	flCompletedXA = 128
)

// Config says where to read from and what to keep.
type Config struct {
	// Addr is the server's host:port.
	Addr string
	// User needs REPLICATION SLAVE (to stream) on the server.
	User, Password string
	// TLS, when set, secures the connection (backend.TLSConfig gives the
	// datasource's); nil: clear text.
	TLS *tls.Config
	// ServerID identifies this reader to the server as a replica. It must
	// differ from the server's and its replicas' ids and from every other
	// reader of that server: MariaDB drops an older connection that
	// registered the same id.
	ServerID uint32
	// Filter keeps the changes of tables it returns true for; nil keeps
	// every table. Rows of other tables are not even decoded, never
	// buffered, and a transaction with nothing left is not delivered. It is
	// called from two goroutines (decoding and Stream's): it must be a pure
	// function of its arguments.
	Filter func(schema, table string) bool
	// MaxTxnChanges bounds the filtered changes of one transaction held in
	// memory until its commit event; 0 means DefaultMaxTxnChanges.
	MaxTxnChanges int
	// Log gets connection losses, reconnects and DDL statements; nil: none.
	Log *zap.Logger
}

// Stats is a Reader's progress, for status displays and lag checks.
type Stats struct {
	// Position is the end of the last transaction read completely,
	// delivered or filtered out: it keeps moving while no transaction
	// passes the filter, so Position.Reached(CurrentPosition(...)) tells
	// "caught up" even then. Before the first transaction: the start.
	Position Position
	// Txns and Changes count what fn was given.
	Txns, Changes uint64
	// Skipped counts transactions read but not delivered: no change passed
	// the filter, or a DDL.
	Skipped uint64
	// DDLs counts DDL statements read (they are not delivered).
	DDLs uint64
	// Reconnects counts connections lost or refused and tried again.
	Reconnects uint64
	// LastEvent is the server timestamp (1 s resolution) of the newest
	// event read, heartbeats excluded.
	LastEvent time.Time
	// Connected is true while a replication connection is streaming.
	Connected bool
	// Streaming is true from the start of a Stream (when Position becomes
	// its `from`, in the same update) until it returns: a caller asking
	// "caught up?" between two Streams must not trust the old Position.
	Streaming bool
	// LastError is the error of the latest reconnect, "" before any.
	LastError string
}

// Reader streams one server's binlog. It keeps Stats across Stream calls;
// one Stream at a time.
type Reader struct {
	cfg     Config
	log     *zap.Logger
	running atomic.Bool

	mu    sync.Mutex
	stats Stats

	// hook, if set (tests), sees every event before it is handled; an error
	// from it is treated like a lost connection.
	hook func(*replication.BinlogEvent) error
}

// NewReader checks cfg. Nothing connects until Stream.
func NewReader(cfg Config) (*Reader, error) {
	if cfg.Addr == "" {
		return nil, errors.New("binlog: Config.Addr is empty")
	}
	if cfg.ServerID == 0 {
		// 0 is the server's "not a replica"; go-mysql panics on it.
		return nil, errors.New("binlog: Config.ServerID must not be 0")
	}
	if cfg.MaxTxnChanges <= 0 {
		cfg.MaxTxnChanges = DefaultMaxTxnChanges
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &Reader{cfg: cfg, log: log.With(zap.String("binlog", cfg.Addr))}, nil
}

// Stream is NewReader(cfg) then Reader.Stream, for a caller that needs no
// Stats.
func Stream(ctx context.Context, cfg Config, from Position, fn func(Txn) error) error {
	r, err := NewReader(cfg)
	if err != nil {
		return err
	}
	return r.Stream(ctx, from, fn)
}

// Stats returns a copy of the reader's progress.
func (r *Reader) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Stream reads the binlog from `from` (the transactions after it) and calls
// fn once per committed transaction that has at least one change passing
// the filter, in commit order, from this goroutine. It returns when ctx
// ends (ctx.Err()), when fn fails (fn's error, unchanged; the transaction
// counts as not delivered), or with one of the Err* values above. A lost
// connection, a server restart or a server that is down is retried with
// back-off, from the end of the last transaction read completely; the
// server must keep its binlogs from that position meanwhile.
func (r *Reader) Stream(ctx context.Context, from Position, fn func(Txn) error) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("binlog: Stream is already running on this Reader")
	}
	defer r.running.Store(false)
	pos, err := parsePos(from)
	if err != nil {
		return err
	}
	r.update(func(s *Stats) { s.Position, s.Streaming = pos.Position(), true })
	defer r.update(func(s *Stats) { s.Streaming = false })
	backoff := minBackoff
	for {
		began, at := time.Now(), pos.Position()
		err := r.session(ctx, &pos, fn)
		r.update(func(s *Stats) { s.Connected = false })
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var lost *lostError
		if !errors.As(err, &lost) {
			return err
		}
		if pos.Position() != at || time.Since(began) > healthySession {
			backoff = minBackoff // it worked for a while: a new failure
		}
		r.update(func(s *Stats) { s.Reconnects++; s.LastError = lost.err.Error() })
		// zap.String, not zap.Error: go-mysql's errors carry stack traces.
		r.log.Warn("binlog connection lost; reconnecting", zap.String("error", lost.err.Error()),
			zap.String("position", string(pos.Position())), zap.Duration("backoff", backoff))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// lostError marks an error Stream retries: the connection, not the data.
type lostError struct{ err error }

func (e *lostError) Error() string { return e.err.Error() }
func (e *lostError) Unwrap() error { return e.err }

// classify turns an error of the replication connection into a fatal one
// (the server said no in a way a retry cannot change) or a lostError.
func (r *Reader) classify(err error) error {
	for _, fatal := range []error{ErrServerConfig, ErrPositionUnavailable} {
		if errors.Is(err, fatal) {
			return err
		}
	}
	var me *mysql.MyError
	if errors.As(err, &me) {
		switch me.Code {
		case mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG: // 1236
			return fmt.Errorf("%w: %s", ErrPositionUnavailable, me.Message)
		case mysql.ER_ACCESS_DENIED_ERROR, mysql.ER_DBACCESS_DENIED_ERROR, mysql.ER_SPECIFIC_ACCESS_DENIED_ERROR:
			return fmt.Errorf("binlog: %s refuses user %q (it needs REPLICATION SLAVE): %w", r.cfg.Addr, r.cfg.User, err)
		}
	}
	return &lostError{err}
}

// txnState is the transaction being read: its GTID event has been seen, its
// end event has not.
type txnState struct {
	open       bool
	gtid       gtid
	standalone bool // DDL and the like: one query event, no XID
	xa         bool // an XA PREPARE group: its rows commit later, elsewhere
	changes    []Change
	tables     map[*replication.TableMapEvent]*tableShape // nil value: filtered out
	// file is the binlog file being read (ROTATE events name it, the
	// server's first one included); end is the offset after the last event
	// handled: after the commit event, where the transaction ends.
	file string
	end  uint32
}

// session is one replication connection's life: connect, check, stream
// until an error.
func (r *Reader) session(ctx context.Context, pos *gtidPos, fn func(Txn) error) error {
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID:                r.cfg.ServerID,
		Flavor:                  mysql.MariaDBFlavor,
		Host:                    r.cfg.Addr, // Port 0: Host is host:port
		User:                    r.cfg.User,
		Password:                r.cfg.Password,
		TLSConfig:               r.cfg.TLS,
		TimestampStringLocation: time.UTC,
		HeartbeatPeriod:         heartbeatPeriod,
		ReadTimeout:             readTimeout,
		DisableRetrySync:        true, // Stream reconnects itself, from a transaction boundary
		EventCacheCount:         eventBuffer,
		Option:                  checkServer,
		RowsEventDecodeFunc:     r.decodeRows,
		// go-mysql logs every connect at info, config included; what
		// matters reaches r.log from here.
		Logger: slog.New(slog.DiscardHandler),
	})
	defer syncer.Close()
	gset, err := mysql.ParseMariadbGTIDSet(string(pos.Position()))
	if err != nil {
		return fmt.Errorf("binlog: %w", err)
	}
	streamer, err := syncer.StartSyncGTID(gset)
	if err != nil {
		return r.classify(err)
	}
	r.update(func(s *Stats) { s.Connected = true })
	r.log.Debug("binlog streaming", zap.String("position", string(pos.Position())))

	st := txnState{tables: map[*replication.TableMapEvent]*tableShape{}}
	for {
		ev, err := streamer.GetEvent(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return r.classify(err)
		}
		if r.hook != nil {
			if err := r.hook(ev); err != nil {
				return &lostError{err}
			}
		}
		if err := r.handle(ev, &st, pos, fn); err != nil {
			return err
		}
	}
}

// decodeRows decodes the rows of filtered tables only: a datasource holds
// many shards' tables, and decoding rows nobody asked for would cost most
// of the reader's CPU. It runs on go-mysql's reading goroutine.
func (r *Reader) decodeRows(e *replication.RowsEvent, data []byte) error {
	pos, err := e.DecodeHeader(data)
	if err != nil {
		return err
	}
	if r.cfg.Filter != nil && !r.cfg.Filter(string(e.Table.Schema), string(e.Table.Table)) {
		return nil // Rows stays empty; handle drops the event by its table
	}
	return e.DecodeData(pos, data)
}

// handle applies one event to the transaction being read.
func (r *Reader) handle(ev *replication.BinlogEvent, st *txnState, pos *gtidPos, fn func(Txn) error) error {
	h := ev.Header
	if h.EventType != replication.HEARTBEAT_EVENT && h.EventType != replication.HEARTBEAT_LOG_EVENT_V2 && h.Timestamp != 0 {
		r.update(func(s *Stats) { s.LastEvent = time.Unix(int64(h.Timestamp), 0) })
	}
	st.end = h.LogPos
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		st.file = string(e.NextLogName)
		return nil

	case *replication.MariadbGTIDEvent:
		if st.open {
			return fmt.Errorf("binlog: GTID %s begins inside transaction %s, which has no end event", e.GTID.String(), st.gtid)
		}
		st.open = true
		st.gtid = gtid{domain: e.GTID.DomainID, server: e.GTID.ServerID, seq: e.GTID.SequenceNumber}
		st.standalone = e.IsStandalone()
		st.xa = e.Flags&flPreparedXA != 0
		return nil

	case *replication.TableMapEvent:
		if !st.open {
			return outside(ev)
		}
		schema, table := string(e.Schema), string(e.Table)
		if r.cfg.Filter != nil && !r.cfg.Filter(schema, table) {
			st.tables[e] = nil
			return nil
		}
		shape, err := newTableShape(e)
		if err != nil {
			return err
		}
		st.tables[e] = shape
		return nil

	case *replication.RowsEvent:
		if !st.open {
			return outside(ev)
		}
		shape, ok := st.tables[e.Table]
		if !ok {
			return fmt.Errorf("binlog: rows event of %s.%s without its TABLE_MAP event in transaction %s", e.Table.Schema, e.Table.Table, st.gtid)
		}
		if shape == nil {
			return nil // filtered out
		}
		var err error
		if st.changes, err = shape.changes(st.changes, e); err != nil {
			return err
		}
		if len(st.changes) > r.cfg.MaxTxnChanges {
			return fmt.Errorf("%w: transaction %s has more than %d changes of filtered tables (Config.MaxTxnChanges)",
				ErrTxnTooLarge, st.gtid, r.cfg.MaxTxnChanges)
		}
		return nil

	case *replication.XIDEvent:
		if !st.open {
			return outside(ev)
		}
		return r.commit(st, pos, fn, h.Timestamp)

	case *replication.QueryEvent:
		if !st.open {
			return outside(ev)
		}
		return r.query(e, st, pos, fn, h.Timestamp)
	}
	if h.EventType == replication.XA_PREPARE_LOG_EVENT {
		if !st.open {
			return outside(ev)
		}
		return r.commit(st, pos, fn, h.Timestamp)
	}
	// Format description, GTID list, binlog checkpoint, heartbeat, stop:
	// housekeeping; GTIDs carry the position.
	return nil
}

func outside(ev *replication.BinlogEvent) error {
	return fmt.Errorf("binlog: %s event outside a transaction (no GTID event before it)", ev.Header.EventType)
}

// query handles a QUERY event inside a GTID group: a commit of a group with
// non-transactional rows, a rollback, a DDL, or (never, in ROW format) a
// statement that changed rows.
func (r *Reader) query(e *replication.QueryEvent, st *txnState, pos *gtidPos, fn func(Txn) error, ts uint32) error {
	q := strings.TrimSpace(string(e.Query))
	verb, rest := splitWord(q)
	next, _ := splitWord(rest)
	switch strings.ToUpper(verb) {
	case "BEGIN", "SAVEPOINT":
		return nil
	case "XA":
		// XA START / XA END open and close the rows of an XA PREPARE group
		// (which XA_PREPARE_LOG_EVENT ends); XA COMMIT / XA ROLLBACK are a
		// group of their own, with no rows.
		switch strings.ToUpper(next) {
		case "COMMIT", "ROLLBACK":
			return r.commit(st, pos, fn, ts)
		}
		return nil
	case "COMMIT":
		return r.commit(st, pos, fn, ts)
	case "ROLLBACK":
		if strings.EqualFold(next, "TO") {
			// Logged only when non-transactional rows are involved; the
			// transactional rows before it were undone on the server
			// and cannot be told apart here.
			if len(st.changes) > 0 {
				return fmt.Errorf("%w: transaction %s rolls back to a savepoint after changing filtered tables "+
					"(only logged when it also changed non-transactional tables)", ErrUnsupported, st.gtid)
			}
			return nil
		}
		if len(st.changes) > 0 {
			return fmt.Errorf("%w: transaction %s was rolled back after changing filtered tables "+
				"(logged because it also changed non-transactional tables)", ErrUnsupported, st.gtid)
		}
		return r.commit(st, pos, fn, ts)
	case "INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD":
		// Rows changed by a statement-format event cannot be read; going
		// on would silently miss them. binlog_format is also a session
		// variable (SUPER can change it).
		return fmt.Errorf("%w: transaction %s changed rows in statement format (%.60q): "+
			"binlog_format must be ROW for every session (SET GLOBAL binlog_format=ROW)", ErrServerConfig, st.gtid, q)
	}
	r.update(func(s *Stats) { s.DDLs++ })
	r.log.Info("binlog DDL (not delivered)", zap.String("gtid", st.gtid.String()),
		zap.String("schema", string(e.Schema)), zap.String("query", truncate(q, 300)))
	if st.standalone {
		return r.commit(st, pos, fn, ts)
	}
	return nil // CREATE TABLE ... SELECT: its rows and an XID follow
}

// commit ends the group being read: delivers it if it has changes, and
// moves the position past it either way.
func (r *Reader) commit(st *txnState, pos *gtidPos, fn func(Txn) error, ts uint32) error {
	if st.xa && len(st.changes) > 0 {
		return fmt.Errorf("%w: XA transaction %s changed filtered tables; its rows commit at a later XA COMMIT",
			ErrUnsupported, st.gtid)
	}
	*pos = pos.with(st.gtid)
	next := pos.Position()
	n := len(st.changes)
	if n > 0 {
		txn := Txn{GTID: st.gtid.String(), Changes: st.changes, Next: next, Time: time.Unix(int64(ts), 0),
			End: FileOffset{File: st.file, Offset: uint64(st.end)}}
		if err := fn(txn); err != nil {
			return err
		}
	}
	r.update(func(s *Stats) {
		s.Position = next
		if n > 0 {
			s.Txns++
			s.Changes += uint64(n)
		} else {
			s.Skipped++
		}
	})
	// fn owns the delivered slice now; the next transaction gets its own.
	*st = txnState{tables: st.tables, file: st.file}
	clear(st.tables)
	return nil
}

func (r *Reader) update(f func(*Stats)) {
	r.mu.Lock()
	f(&r.stats)
	r.mu.Unlock()
}

// checkServer runs on every replication connection before it streams, so a
// server restarted with other settings is caught too. It refuses what would
// make rows unreadable or nameless, saying what to fix.
func checkServer(c *client.Conn) error {
	res, err := c.Execute("SELECT @@version, @@log_bin, @@binlog_format, @@binlog_row_image")
	if err != nil {
		return err
	}
	get := func(col int) string { s, _ := res.GetString(0, col); return s }
	version, logBin, format, image := get(0), get(1), get(2), get(3)
	if !strings.Contains(strings.ToLower(version), "mariadb") {
		return fmt.Errorf("%w: server version %s is not MariaDB (MariaDB GTIDs and row metadata are required)", ErrServerConfig, version)
	}
	var problems []string
	if logBin != "1" && !strings.EqualFold(logBin, "ON") {
		problems = append(problems, "log_bin is OFF: start mariadbd with --log-bin")
	}
	if !strings.EqualFold(format, "ROW") {
		problems = append(problems, fmt.Sprintf("binlog_format is %s: set binlog_format=ROW", format))
	}
	if !strings.EqualFold(image, "FULL") {
		problems = append(problems, fmt.Sprintf("binlog_row_image is %s: set binlog_row_image=FULL", image))
	}
	res, err = c.Execute("SELECT @@binlog_row_metadata")
	if err != nil {
		// Unknown variable: MariaDB before 10.5.
		problems = append(problems, fmt.Sprintf("@@binlog_row_metadata is not readable (%v): MariaDB 10.5 or later with binlog_row_metadata=FULL is required", err))
	} else if meta, _ := res.GetString(0, 0); !strings.EqualFold(meta, "FULL") {
		problems = append(problems, fmt.Sprintf("binlog_row_metadata is %s: set binlog_row_metadata=FULL (column names in the binlog)", meta))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s (SET GLOBAL and in the server's configuration)", ErrServerConfig, strings.Join(problems, "; "))
	}
	return nil
}

// splitWord returns the first word of a statement (after any leading
// comments: MariaDB logs statements with the client's comments) and what
// follows.
func splitWord(q string) (word, rest string) {
	for {
		q = strings.TrimSpace(q)
		var end string
		switch {
		case strings.HasPrefix(q, "/*"):
			end = "*/"
		case strings.HasPrefix(q, "-- "), strings.HasPrefix(q, "--\t"), q == "--", strings.HasPrefix(q, "--\n"), strings.HasPrefix(q, "#"):
			end = "\n"
		}
		if end == "" {
			break
		}
		i := strings.Index(q, end)
		if i < 0 {
			return "", ""
		}
		q = q[i+len(end):]
	}
	i := strings.IndexFunc(q, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '(' })
	if i < 0 {
		return q, ""
	}
	return q[:i], strings.TrimSpace(q[i:])
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
