package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"
)

// TestServerRestart: mysqld killed (SIGKILL) while the reader is inside a
// transaction, then started again. Writers retry until their commit is
// acknowledged; afterwards every row was delivered exactly once, in whole
// transactions, and the reader reconnected by itself.
func TestServerRestart(t *testing.T) {
	m, db := startIM(t)
	db.SetMaxIdleConns(0) // no stale pooled connections after the restart
	r := newReader(t, m, Config{Filter: imOnly})
	killed := make(chan struct{})
	var killOnce sync.Once
	r.hook = func(ev *replication.BinlogEvent) error {
		// Between a transaction's rows and its commit event, once. Events
		// already in the socket buffer could still complete the
		// transaction; failing this read as the dead socket soon would
		// makes the mid-transaction loss certain.
		var err error
		if rows, ok := ev.Event.(*replication.RowsEvent); ok && rows.Rows[0][0].(uint64) == 100 {
			killOnce.Do(func() { m.Kill(); close(killed); err = errors.New("mysqld killed") })
		}
		return err
	}
	c := collect(t, r, currentPos(t, db))

	const txns, perTxn = 150, 3
	writerDone := make(chan error, 1)
	go func() {
		ctx := context.Background()
		for i := range txns {
			deadline := time.Now().Add(30 * time.Second)
			for {
				// INSERT IGNORE: a commit that happened but whose
				// acknowledgement was lost is repeated as a no-op, which
				// MariaDB does not log.
				err := func() error {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback()
					for j := 1; j <= perTxn; j++ {
						if _, err := tx.Exec("INSERT IGNORE INTO im_conv_seq (conv_id) VALUES (?)", i*perTxn+j); err != nil {
							return err
						}
					}
					return tx.Commit()
				}()
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					writerDone <- fmt.Errorf("txn %d: %v", i, err)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		writerDone <- nil
	}()

	select {
	case <-killed:
	case <-time.After(20 * time.Second):
		t.Fatal("the reader never reached conv_id 100")
	}
	time.Sleep(300 * time.Millisecond) // a few failed reconnects
	m.Start()

	seen := map[uint64]bool{}
	for len(seen) < txns*perTxn {
		x := c.next(t)
		if len(x.Changes) != perTxn {
			t.Fatalf("txn %s has %d changes, want %d", x.GTID, len(x.Changes), perTxn)
		}
		first := x.Changes[0].After[0].(uint64)
		if first == 100 && r.Stats().Reconnects == 0 {
			t.Fatalf("txn %s of conv_id 100 delivered without the reconnect its loss needs", x.GTID)
		}
		for j, ch := range x.Changes {
			id := ch.After[0].(uint64)
			if ch.Kind != Insert || id != first+uint64(j) || (first-1)%perTxn != 0 {
				t.Fatalf("txn %s is not one writer transaction: %+v", x.GTID, x.Changes)
			}
			if seen[id] {
				t.Fatalf("conv_id %d delivered twice", id)
			}
			seen[id] = true
		}
	}
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	c.caughtUp(t, db)
	select {
	case x := <-c.txns:
		t.Fatalf("extra transaction after all rows: %+v", x)
	default:
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM im_conv_seq").Scan(&n); err != nil || n != txns*perTxn {
		t.Fatalf("table has %d rows (%v), want %d", n, err, txns*perTxn)
	}
	if st := r.Stats(); st.Reconnects < 1 || !st.Connected {
		t.Fatalf("stats %+v: want a reconnect and a live connection", st)
	}
	t.Logf("stats after the restart: %+v", r.Stats())
}

// TestSnapshotThenStream is the property migration's backfill relies on: a
// table read in the snapshot SnapshotPosition opens, plus the stream from
// the position it returns, is the table, under concurrent inserts, updates
// and deletes. Each change is applied strictly (an insert of a present key
// or a before image that differs from the copy fails), so a position a
// transaction too early or too late is caught.
func TestSnapshotThenStream(t *testing.T) {
	m, db := startIM(t)
	ctx := context.Background()
	mustExec(t, db, "CREATE TABLE kv (id INT NOT NULL PRIMARY KEY, v BIGINT UNSIGNED NOT NULL, s VARCHAR(20) NULL)")
	for i := 1; i <= 50; i++ {
		mustExec(t, db, "INSERT INTO kv VALUES (?, ?, ?)", i, i, fmt.Sprint("row", i))
	}

	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(1, 2))
		next := 51
		op := func(ex interface {
			Exec(string, ...any) (sql.Result, error)
		}) error {
			var err error
			switch k := rng.IntN(10); {
			case k < 4:
				_, err = ex.Exec("INSERT INTO kv VALUES (?, ?, NULL)", next, rng.Uint64())
				next++
			case k < 8:
				_, err = ex.Exec("UPDATE kv SET v = ?, s = ? WHERE id = ?", rng.Uint64(), fmt.Sprint("u", rng.IntN(1000)), 1+rng.IntN(next))
			default:
				_, err = ex.Exec("DELETE FROM kv WHERE id = ?", 1+rng.IntN(next))
			}
			return err
		}
		for {
			select {
			case <-stop:
				writerDone <- nil
				return
			default:
			}
			if rng.IntN(3) > 0 {
				if err := op(db); err != nil {
					writerDone <- err
					return
				}
				continue
			}
			tx, err := db.Begin()
			if err != nil {
				writerDone <- err
				return
			}
			for range 1 + rng.IntN(3) {
				if err := op(tx); err != nil {
					tx.Rollback()
					writerDone <- err
					return
				}
			}
			if err := tx.Commit(); err != nil {
				writerDone <- err
				return
			}
		}
	}()

	time.Sleep(150 * time.Millisecond)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pos, err := SnapshotPosition(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // commits after the snapshot, before the read
	table := readKV(t, conn)
	mustExec(t, conn, "COMMIT")
	conn.Close()
	time.Sleep(150 * time.Millisecond)
	close(stop)
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}

	r := newReader(t, m, Config{Filter: func(_, table string) bool { return table == "kv" }})
	c := collect(t, r, pos)
	c.caughtUp(t, db)
	c.stop()
	changes := 0
	for len(c.txns) > 0 {
		x := <-c.txns
		for _, ch := range x.Changes {
			changes++
			switch ch.Kind {
			case Insert:
				id := ch.After[0].(int64)
				if _, ok := table[id]; ok {
					t.Fatalf("txn %s inserts id %d, which the snapshot already has", x.GTID, id)
				}
				table[id] = ch.After
			case Update, Delete:
				id := ch.Before[0].(int64)
				if !reflect.DeepEqual(table[id], ch.Before) {
					t.Fatalf("txn %s: %s of id %d from %#v, but the copy has %#v", x.GTID, ch.Kind, id, ch.Before, table[id])
				}
				delete(table, id)
				if ch.Kind == Update {
					table[ch.After[0].(int64)] = ch.After
				}
			}
		}
	}
	final := readKV(t, db)
	if !reflect.DeepEqual(table, final) {
		t.Fatalf("snapshot + stream has %d rows, the table %d; they differ", len(table), len(final))
	}
	if changes == 0 {
		t.Fatal("no change after the snapshot: the test proved nothing")
	}
	t.Logf("snapshot at %s: %d changes after it, %d rows at the end", pos, changes, len(final))
}

// readKV reads table kv as the stream renders its rows.
func readKV(t *testing.T, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) map[int64][]any {
	t.Helper()
	rows, err := q.QueryContext(context.Background(), "SELECT id, v, s FROM kv")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64][]any{}
	for rows.Next() {
		var id int64
		var v uint64
		var s sql.NullString
		if err := rows.Scan(&id, &v, &s); err != nil {
			t.Fatal(err)
		}
		row := []any{id, v, nil}
		if s.Valid {
			row[2] = s.String
		}
		out[id] = row
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
