package integration

import (
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convoy-im/convoy/router"
)

// Helpers shared by the migration tests (miglock_test.go,
// migrate_drills_test.go): conversations of a shard, writers that record
// what their clients were told, and the checks of what was stored.

// convsOn returns n conversation ids on shard sh.
func convsOn(sh router.Shard, n int) []uint64 { return router.KeysOf(sh, n, 1) }

// ack is one acknowledged (or failed) message insert.
type ack struct {
	conv, msgID, seq uint64
	start            time.Time
	took             time.Duration
	err              error
	proxy            int
}

// writer inserts messages (seq allocated by Convoy) into one conversation
// through one proxy until stopped.
type writer struct {
	conv  uint64
	proxy int
	db    *sql.DB
	next  uint64        // msg_id: writer number << 32 | counter
	every time.Duration // pause after each insert; 2 ms if zero
	// hold, when set and true, keeps the writer idle (parked once its last
	// insert returned), so a test can compare both sides of a shard.
	hold   *atomic.Bool
	parked atomic.Bool
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	acks   []ack
}

func (w *writer) run() {
	defer close(w.done)
	every := w.every
	if every == 0 {
		every = 2 * time.Millisecond
	}
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		if w.hold != nil && w.hold.Load() {
			w.parked.Store(true)
			time.Sleep(5 * time.Millisecond)
			continue
		}
		w.parked.Store(false)
		w.next++
		a := ack{conv: w.conv, msgID: w.next, start: time.Now(), proxy: w.proxy}
		r, err := w.db.Exec("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, NOW(3))", w.conv, w.next)
		a.took = time.Since(a.start)
		if err == nil {
			var id int64
			id, err = r.LastInsertId()
			a.seq = uint64(id)
		}
		a.err = err
		w.mu.Lock()
		w.acks = append(w.acks, a)
		w.mu.Unlock()
		time.Sleep(every)
	}
}

// halt stops the writer and waits until its last insert returned; a second
// call is a no-op.
func (w *writer) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *writer) snapshot() []ack {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.acks)
}

// checkMessages checks what db (Convoy, or the authoritative side's
// physical table) stores of convs against what the writers' clients were
// told: every acknowledged message is stored once, with the seq its client
// got; every stored message was sent (a failed insert may or may not have
// been stored: its outcome is unknown to the client); no seq was given to
// two acknowledged messages; seqs are contiguous from 1 per conversation,
// counting the preloaded messages below first. table is "conv_msg" through
// Convoy or a physical "db.table". It returns the rows stored.
func checkMessages(t *testing.T, db *sql.DB, table string, convs []uint64, writers []*writer, preloaded map[uint64]bool) int {
	t.Helper()
	acked := map[uint64]ack{}
	attempted := map[uint64]bool{}
	seqOf := map[[2]uint64]uint64{} // (conv, seq) -> msg_id acknowledged with it
	for _, w := range writers {
		for _, a := range w.snapshot() {
			attempted[a.msgID] = true
			if a.err != nil {
				continue
			}
			acked[a.msgID] = a
			if other, dup := seqOf[[2]uint64{a.conv, a.seq}]; dup {
				t.Errorf("conversation %d: seq %d acknowledged for messages %d and %d", a.conv, a.seq, other, a.msgID)
			}
			seqOf[[2]uint64{a.conv, a.seq}] = a.msgID
		}
	}
	total := 0
	for _, conv := range convs {
		rows, err := db.Query("SELECT seq, msg_id FROM "+table+" WHERE conv_id = ? ORDER BY seq", conv)
		if err != nil {
			t.Fatal(err)
		}
		want := uint64(1)
		seen := map[uint64]bool{}
		for rows.Next() {
			var seq, msgID uint64
			if err := rows.Scan(&seq, &msgID); err != nil {
				t.Fatal(err)
			}
			if seq != want {
				t.Errorf("conversation %d: seq %d after %d (not contiguous)", conv, seq, want-1)
			}
			want = seq + 1
			if seen[msgID] {
				t.Errorf("conversation %d: message %d stored twice", conv, msgID)
			}
			seen[msgID] = true
			if !attempted[msgID] && !preloaded[msgID] {
				t.Errorf("conversation %d: message %d was never sent", conv, msgID)
			}
			if a, ok := acked[msgID]; ok && a.seq != seq {
				t.Errorf("conversation %d: message %d stored with seq %d, its client was told %d", conv, msgID, seq, a.seq)
			}
			delete(acked, msgID)
			total++
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	var lost []uint64
	for id, a := range acked {
		if slices.Contains(convs, a.conv) {
			lost = append(lost, id)
		}
	}
	slices.Sort(lost)
	if len(lost) > 0 {
		t.Errorf("%d acknowledged messages lost, e.g. %v", len(lost), lost[:min(5, len(lost))])
	}
	return total
}

// shardDump returns every row of shard sh in the physical table db.table
// (keyed by key), sorted, one string per row.
func shardDump(t *testing.T, db *sql.DB, table, key string, sh router.Shard) []string {
	t.Helper()
	rows, err := db.Query(fmt.Sprintf("SELECT * FROM %s WHERE CRC32(%s) %% 1024 = ?", table, key), int(sh))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			if v == nil {
				parts[i] = "NULL"
			} else {
				parts[i] = fmt.Sprintf("%q", v)
			}
		}
		out = append(out, strings.Join(parts, ","))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
