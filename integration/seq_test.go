package integration

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/convoy-im/convoy/router"
)

// TestSeqAllocation: an INSERT into conv_msg without seq gets the next seq of
// its conversation from im_conv_seq, in the same local transaction; the
// client sees it as LastInsertId / LAST_INSERT_ID(); concurrent writers of
// one conversation never share a seq.
func TestSeqAllocation(t *testing.T) {
	s := newStack(t)
	for _, mode := range []string{"&interpolateParams=true", "&interpolateParams=false"} {
		db := openDSN(t, s.convoy.dsn("app", "app secret", "im")+mode)
		conv := int64(7000)
		if mode == "&interpolateParams=false" {
			conv = 7001
		}
		const writers, each = 8, 25
		var mu sync.Mutex
		var got []int64
		var wg sync.WaitGroup
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; i < each; i++ {
					r, err := db.Exec("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 1, NOW(3))", conv, conv*1000+int64(w*each+i), w)
					if err != nil {
						t.Errorf("insert: %v", err)
						return
					}
					id, _ := r.LastInsertId()
					mu.Lock()
					got = append(got, id)
					mu.Unlock()
				}
			}(w)
		}
		wg.Wait()
		sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
		for i, seq := range got {
			if seq != int64(i+1) {
				t.Fatalf("%s: seqs handed out %v...: position %d has %d (duplicates or gaps)", mode, got[:min(len(got), 10)], i, seq)
			}
		}
		rows := queryRows(t, db, "SELECT seq FROM conv_msg WHERE conv_id = ? ORDER BY seq", conv)
		if len(rows) != writers*each || rows[0][0] != "1" || rows[len(rows)-1][0] != fmt.Sprint(writers*each) {
			t.Fatalf("%s: stored seqs: %d rows, first %v last %v", mode, len(rows), rows[0], rows[len(rows)-1])
		}
		if rows := queryRows(t, db, "SELECT max_seq FROM im_conv_seq WHERE conv_id = ?", conv); rows[0][0] != fmt.Sprint(writers*each) {
			t.Fatalf("%s: im_conv_seq.max_seq = %v", mode, rows)
		}

		// Multi-row, several conversations and shards: each row gets the
		// next seq of its own conversation; LastInsertId is the first row's.
		ctx := context.Background()
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.ExecContext(ctx, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, NOW()), (?, ?, 1, 1, NOW()), (?, ?, 1, 1, NOW())",
			conv+10, conv*1000+900, conv, conv*1000+901, conv+10, conv*1000+902)
		if err != nil {
			t.Fatal(err)
		}
		if id, _ := r.LastInsertId(); id != 1 {
			t.Errorf("%s: multi-row LastInsertId = %d, want 1 (first row's seq)", mode, id)
		}
		if n, _ := r.RowsAffected(); n != 3 {
			t.Errorf("%s: RowsAffected = %d", mode, n)
		}
		var last int64
		if err := c.QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&last); err != nil || last != 1 {
			t.Errorf("%s: LAST_INSERT_ID() = %d, %v", mode, last, err)
		}
		if rows := queryRows(t, db, "SELECT msg_id, seq FROM conv_msg WHERE conv_id IN (?, ?) AND msg_id >= ? ORDER BY msg_id", conv, conv+10, conv*1000+900); fmt.Sprint(rows) != fmt.Sprintf("[[%d 1] [%d %d] [%d 2]]", conv*1000+900, conv*1000+901, writers*each+1, conv*1000+902) {
			t.Errorf("%s: multi-row seqs: %v", mode, rows)
		}
		// Inside a transaction, a rollback returns the seqs too.
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, NOW())", conv, conv*1000+950); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		r, err = db.Exec("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, NOW())", conv, conv*1000+951)
		if err != nil {
			t.Fatal(err)
		}
		if id, _ := r.LastInsertId(); id != int64(writers*each+2) {
			t.Errorf("%s: seq after a rolled-back insert = %d, want %d", mode, id, writers*each+2)
		}
		// A failing INSERT (duplicate msg_id) stops the batch inside its own
		// transaction: its seq is given back and no transaction stays open
		// on the pooled connection.
		const ins = "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, NOW())"
		for i := 0; i < 3; i++ {
			if _, err := db.Exec(ins, conv, conv*1000+951); errno(err) != 1062 {
				t.Fatalf("%s: duplicate msg_id: %v, want 1062", mode, err)
			}
		}
		r, err = db.Exec("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, NOW()), (?, ?, 2, 1, NOW())",
			conv, conv*1000+952, conv, conv*1000+953)
		if err != nil {
			t.Fatal(err)
		}
		if id, _ := r.LastInsertId(); id != int64(writers*each+3) {
			t.Errorf("%s: seq after failed inserts = %d, want %d (no gap)", mode, id, writers*each+3)
		}
		if rows := queryRows(t, db, "SELECT msg_id, seq, sender_uid FROM conv_msg WHERE conv_id = ? AND msg_id >= ? ORDER BY seq", conv, conv*1000+952); fmt.Sprint(rows) != fmt.Sprintf("[[%d %d 1] [%d %d 2]]", conv*1000+952, writers*each+3, conv*1000+953, writers*each+4) {
			t.Errorf("%s: two rows of one conversation: %v", mode, rows)
		}
		var inTxn int
		if err := db.QueryRow("SELECT @@in_transaction").Scan(&inTxn); err != nil || inTxn != 0 {
			t.Errorf("%s: @@in_transaction after the failed batches = %d, %v", mode, inTxn, err)
		}
		// In a transaction the allocation and the INSERT share the pinned
		// connection; COMMIT keeps both.
		tx, err = db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for i := int64(0); i < 2; i++ {
			if _, err := tx.Exec(ins, conv, conv*1000+960+i); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if rows := queryRows(t, db, "SELECT seq FROM conv_msg WHERE conv_id = ? AND msg_id >= ? ORDER BY seq", conv, conv*1000+960); fmt.Sprint(rows) != fmt.Sprintf("[[%d] [%d]]", writers*each+5, writers*each+6) {
			t.Errorf("%s: seqs of a committed transaction: %v", mode, rows)
		}
		// RETURNING hands the allocated seqs back, in the VALUES order, also
		// for rows split over shards.
		rows = queryRows(t, db, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, NOW()), (?, ?, 1, 1, NOW()), (?, ?, 1, 1, NOW()) RETURNING conv_id, seq, msg_id",
			conv+100, conv*1000+970, conv+200, conv*1000+971, conv+100, conv*1000+972)
		if want := fmt.Sprintf("[[%d 1 %d] [%d 1 %d] [%d 2 %d]]", conv+100, conv*1000+970, conv+200, conv*1000+971, conv+100, conv*1000+972); fmt.Sprint(rows) != want {
			t.Errorf("%s: INSERT ... RETURNING seq: %v, want %s", mode, rows, want)
		}
		rows = queryRows(t, db, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, NOW()) RETURNING seq", conv+100, conv*1000+973)
		if fmt.Sprint(rows) != "[[3]]" {
			t.Errorf("%s: one-conversation INSERT ... RETURNING seq: %v, want [[3]]", mode, rows)
		}
		// INSERT ... SET without seq allocates like the VALUES form.
		r, err = db.Exec("INSERT INTO conv_msg SET conv_id = ?, msg_id = ?, sender_uid = 1, msg_type = 1, created_at = NOW()", conv+100, conv*1000+974)
		if err != nil {
			t.Fatal(err)
		}
		if id, _ := r.LastInsertId(); id != 4 {
			t.Errorf("%s: INSERT ... SET seq = %d, want 4", mode, id)
		}
		c.Close()
	}
}

// TestSeqAllocationWithTrigger: a trigger on the physical im_conv_seq table
// (a DBA's audit trigger) makes MariaDB report 0 as the insert id of the
// allocation's ON DUPLICATE KEY UPDATE; Convoy reads LAST_INSERT_ID()
// back instead, so every send still gets its seq, never an error for a
// stored message (which its client would send again).
func TestSeqAllocationWithTrigger(t *testing.T) {
	s := newStack(t)
	db := s.convoy.open(t, "app", "app secret", "im")
	admin := s.convoy.open(t, "convoy", "convoy", "im")
	const conv, other = 7100, 7101
	snap := snapshotOf(t, s)
	for _, c := range []uint64{conv, other} {
		seqT := snap.Physical("im_conv_seq", router.ShardOf(c))
		ds := s.ds[0]
		if seqT.Datasource == "ds1" {
			ds = s.ds[1]
		}
		q := fmt.Sprintf("%s.%s", seqT.Database, seqT.Table)
		ds.Exec(t, fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.seq_audit (id INT AUTO_INCREMENT PRIMARY KEY, conv_id BIGINT UNSIGNED, max_seq BIGINT UNSIGNED)", seqT.Database),
			fmt.Sprintf("CREATE TRIGGER IF NOT EXISTS %s.seq_audit_au AFTER UPDATE ON %s FOR EACH ROW INSERT INTO %s.seq_audit (conv_id, max_seq) VALUES (NEW.conv_id, NEW.max_seq)", seqT.Database, q, seqT.Database),
			fmt.Sprintf("CREATE TRIGGER IF NOT EXISTS %s.seq_audit_ai AFTER INSERT ON %s FOR EACH ROW INSERT INTO %s.seq_audit (conv_id, max_seq) VALUES (NEW.conv_id, NEW.max_seq)", seqT.Database, q, seqT.Database))
	}
	mustExec(t, admin, "INSERT INTO im_conv_seq (conv_id, max_seq, member_cnt) VALUES (?, 0, 2)", conv)
	for i := int64(1); i <= 5; i++ {
		r, err := db.Exec("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, NOW(3))", conv, 71000+i)
		if err != nil {
			t.Fatalf("send %d with a trigger on im_conv_seq: %v", i, err)
		}
		if id, _ := r.LastInsertId(); id != i {
			t.Fatalf("send %d: LastInsertId %d", i, id)
		}
		var seq int64
		if err := db.QueryRow("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, NOW(3)) RETURNING seq", other, 72000+i).Scan(&seq); err != nil || seq != i {
			t.Fatalf("send %d with RETURNING (a conversation without a counter row yet): seq %d, %v", i, seq, err)
		}
	}
	// Several conversations in one statement: the general path.
	r, err := db.Exec("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, NOW()), (?, ?, 1, 1, NOW())", conv, 71100, other, 72100)
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := r.LastInsertId(); id != 6 {
		t.Errorf("multi-conversation insert: LastInsertId %d, want 6", id)
	}
	if rows := queryRows(t, db, "SELECT conv_id, seq FROM conv_msg WHERE conv_id IN (?, ?) ORDER BY conv_id, seq", conv, other); len(rows) != 12 || rows[5][1] != "6" || rows[11][1] != "6" {
		t.Errorf("stored: %v", rows)
	}
}
