package migrate

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/convoy-im/convoy/router"
)

// imLoad writes IM traffic to the five tables of one source database, for
// conversations and users of several shards: messages sent (a transaction
// allocating a seq and writing conv_msg, msg_content, im_inbox and
// im_conv_member), deleted, edited, inboxes trimmed, conversations created,
// and transactions rolled back.
type imLoad struct {
	db     *sql.DB
	tables map[string]string // logical -> database.physical
	convs  []uint64
	uids   []uint64
	msgID  atomic.Uint64
	newKey atomic.Uint64 // next candidate for a new conversation id
	shards []router.Shard
	ops    atomic.Int64
	mu     sync.Mutex
	errs   []error
}

func (l *imLoad) q(format, logical string) string { return fmt.Sprintf(format, l.tables[logical]) }

// seed writes msgs messages to every conversation and makes every user a
// member of five conversations with three inbox rows each.
func (l *imLoad) seed(t *testing.T, msgs int) {
	var seqs, cm, mc, members, inbox [][]any
	for i, conv := range l.convs {
		seqs = append(seqs, []any{conv, msgs, 5})
		for seq := 1; seq <= msgs; seq++ {
			id := l.msgID.Add(1)
			sender := l.uids[(i+seq)%len(l.uids)]
			cm = append(cm, []any{conv, seq, id, sender, 1, "2024-05-01 12:00:00.125"})
			mc = append(mc, []any{id, conv, sender, 1, []byte(fmt.Sprintf("body %d \xff", id)), "2024-05-01 12:00:00.125"})
		}
	}
	for i, uid := range l.uids {
		for j := 0; j < 5; j++ {
			conv := l.convs[(i+j)%len(l.convs)]
			members = append(members, []any{uid, conv, 0, j % 2, "2024-05-02 00:00:00.000"})
			for seq := 1; seq <= 3; seq++ {
				inbox = append(inbox, []any{uid, conv, seq, 0, "2024-05-02 00:00:00.000"})
			}
		}
	}
	insert(t, l.db, l.tables["im_conv_seq"], []string{"conv_id", "max_seq", "member_cnt"}, seqs)
	insert(t, l.db, l.tables["conv_msg"], []string{"conv_id", "seq", "msg_id", "sender_uid", "msg_type", "created_at"}, cm)
	insert(t, l.db, l.tables["msg_content"], []string{"msg_id", "conv_id", "sender_uid", "msg_type", "content", "created_at"}, mc)
	insert(t, l.db, l.tables["im_conv_member"], []string{"uid", "conv_id", "last_read_seq", "mute", "updated_at"}, members)
	insert(t, l.db, l.tables["im_inbox"], []string{"uid", "conv_id", "seq", "msg_id", "send_time"}, inbox)
}

// run writes until ctx ends, one transaction at a time.
func (l *imLoad) run(ctx context.Context, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	for ctx.Err() == nil {
		conv := l.convs[r.IntN(len(l.convs))]
		uid := l.uids[r.IntN(len(l.uids))]
		var err error
		switch p := r.IntN(100); {
		case p < 50:
			err = l.send(ctx, conv, uid, true)
		case p < 65:
			err = l.tx(ctx, true,
				l.q("DELETE FROM %s WHERE conv_id = ? ORDER BY seq LIMIT 1", "conv_msg"), []any{conv},
				l.q("DELETE FROM %s WHERE conv_id = ? ORDER BY msg_id LIMIT 1", "msg_content"), []any{conv})
		case p < 80:
			err = l.tx(ctx, true,
				l.q("UPDATE %s SET mute = 1 - mute, updated_at = NOW(3) WHERE uid = ?", "im_conv_member"), []any{uid},
				l.q("UPDATE %s SET content = ? WHERE conv_id = ? ORDER BY msg_id DESC LIMIT 1", "msg_content"), []any{[]byte{0, byte(r.Uint32()), 0xfe}, conv})
		case p < 90:
			err = l.tx(ctx, true, l.q("DELETE FROM %s WHERE uid = ? AND seq <= ?", "im_inbox"), []any{uid, r.IntN(5)})
		case p < 95:
			err = l.send(ctx, conv, uid, false) // rolled back
		default:
			sh := l.shards[r.IntN(len(l.shards))]
			k := l.newKey.Add(1)
			for router.ShardOf(k) != sh {
				k = l.newKey.Add(1)
			}
			err = l.tx(ctx, true,
				l.q("INSERT INTO %s (conv_id, max_seq, member_cnt) VALUES (?, 0, 1)", "im_conv_seq"), []any{k},
				l.q("INSERT INTO %s (uid, conv_id, updated_at) VALUES (?, ?, NOW(3))", "im_conv_member"), []any{uid, k})
		}
		var me *mysqldrv.MySQLError
		switch {
		case err == nil:
			l.ops.Add(1)
		case ctx.Err() != nil:
		case errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205): // two writers' locks
		default:
			l.mu.Lock()
			l.errs = append(l.errs, err)
			l.mu.Unlock()
		}
		time.Sleep(time.Millisecond)
	}
}

// send allocates the next seq of conv and writes a message.
func (l *imLoad) send(ctx context.Context, conv, uid uint64, commit bool) error {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, l.q("UPDATE %s SET max_seq = max_seq + 1 WHERE conv_id = ?", "im_conv_seq"), conv); err != nil {
		return err
	}
	var seq uint64
	if err := tx.QueryRowContext(ctx, l.q("SELECT max_seq FROM %s WHERE conv_id = ?", "im_conv_seq"), conv).Scan(&seq); err != nil {
		return err
	}
	id := l.msgID.Add(1)
	for _, s := range []struct {
		q    string
		args []any
	}{
		{l.q("INSERT INTO %s VALUES (?, ?, ?, ?, 1, NOW(3))", "conv_msg"), []any{conv, seq, id, uid}},
		{l.q("INSERT INTO %s VALUES (?, ?, ?, 1, ?, NOW(3))", "msg_content"), []any{id, conv, uid, []byte(fmt.Sprint("m", id))}},
		{l.q("INSERT INTO %s VALUES (?, ?, ?, ?, NOW(3))", "im_inbox"), []any{uid, conv, seq, id}},
		{l.q("UPDATE %s SET last_read_seq = ?, updated_at = NOW(3) WHERE uid = ?", "im_conv_member"), []any{seq, uid}},
	} {
		if _, err := tx.ExecContext(ctx, s.q, s.args...); err != nil {
			return err
		}
	}
	if !commit {
		return tx.Rollback()
	}
	return tx.Commit()
}

// tx runs pairs of (statement, arguments) in one transaction.
func (l *imLoad) tx(ctx context.Context, commit bool, stmts ...any) error {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for i := 0; i < len(stmts); i += 2 {
		if _, err := tx.ExecContext(ctx, stmts[i].(string), stmts[i+1].([]any)...); err != nil {
			return err
		}
	}
	if !commit {
		return tx.Rollback()
	}
	return tx.Commit()
}

// A whole backfill of shard 282 (which owns conv_id 2^64-1) out of the
// shared physical tables of router.SharedLayout (128 shards a table) into
// tables of its own on another server, while two writers change rows of
// the shard and of two other shards in the same tables for the whole run:
// killed in the middle of the copy of the second table, resumed in a new Backfill from the saved
// JSON, killed again in the middle of the binlog replay, resumed again.
// After catch-up the target holds exactly the source's rows of the shard
// (dump and checksum, all five tables) and nothing of the other shards.
func testBackfill(t *testing.T, e *env) {
	ctx := testCtx(t)
	const shard = 282
	doc, err := router.SharedLayout([]router.Datasource{{Name: "ds0", Addr: e.src.Addr(), User: "root"}}, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	routes, err := router.NewSnapshot(doc)
	if err != nil {
		t.Fatal(err)
	}
	from := routes.Target(shard)
	to := router.Target{Datasource: "ds2", Database: "im_9", Table: shard}
	if from.Table != 256 {
		t.Fatalf("shard %d is in table %d of the shared layout; the test expects 256 (shards 256-383)", shard, from.Table)
	}
	e.src.Exec(t, "CREATE DATABASE "+from.Database)
	e.dst.Exec(t, "CREATE DATABASE "+to.Database)
	load := &imLoad{db: e.sdb, tables: map[string]string{}, shards: []router.Shard{shard, 300, 383}}
	for _, l := range router.ShardedTables() {
		e.src.Exec(t, imTable(t, l, from.Database, router.PhysicalTableName(l, from.Table)))
		e.dst.Exec(t, imTable(t, l, to.Database, router.PhysicalTableName(l, to.Table)))
		load.tables[l] = from.Database + "." + router.PhysicalTableName(l, from.Table)
	}
	for _, sh := range load.shards {
		load.convs = append(load.convs, keysOfShard(sh, 20, 1)...)
		load.uids = append(load.uids, keysOfShard(sh, 20, 1_000_000)...)
	}
	load.convs = append(load.convs, math.MaxUint64)
	load.newKey.Store(10_000_000)
	load.seed(t, 20)

	moves, err := ShardMoves(shard, e.sdb, from, e.ddb, to)
	if err != nil {
		t.Fatal(err)
	}
	cfg := BackfillConfig{Job: "job-1", Shard: shard, Tables: moves, Rate: 1500, ChunkRows: 100}
	newBackfill := func() *Backfill {
		cfg.Binlog = e.binlogConfig(t)
		b, err := NewBackfill(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var mu sync.Mutex
	var saved []byte
	var saves []BackfillState
	save := func(st BackfillState) error {
		b, err := json.Marshal(st)
		if err != nil {
			return err
		}
		mu.Lock()
		saved = b
		saves = append(saves, st)
		mu.Unlock()
		return nil
	}
	last := func() BackfillState {
		mu.Lock()
		defer mu.Unlock()
		var st BackfillState
		if err := json.Unmarshal(saved, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}

	wctx, stopWriters := context.WithCancel(ctx)
	var writers sync.WaitGroup
	for i := range 2 {
		writers.Add(1)
		go func() { defer writers.Done(); load.run(wctx, uint64(i)) }()
	}
	defer func() { stopWriters(); writers.Wait() }()
	time.Sleep(200 * time.Millisecond)

	// 1: killed in the middle of the copy.
	b := newBackfill()
	rctx, cancel := context.WithCancel(ctx)
	chunks := 0 // kills
	st, err := b.Run(rctx, BackfillState{}, func(st BackfillState) error {
		// Killed in the middle of the second table.
		if ck := st.Copy[moves[1].Source.String()]; ck.Rows >= 200 && !ck.Done && chunks == 0 {
			chunks++
			cancel()
		}
		return save(st)
	})
	cancel()
	first := last()
	if !errors.Is(err, context.Canceled) || st.Phase != PhaseCopying || first.Start == nil || first.Phase != PhaseCopying {
		t.Fatalf("first run: %v, state %+v, saved %+v", err, st, first)
	}
	if saves[0].Start == nil || len(saves[0].Copy) != 0 {
		t.Fatalf("the first save must hold P_min and no copy progress: %+v", saves[0])
	}
	t.Logf("killed mid-copy: %+v", first.Copy)

	// 2: resumed by a new process; killed during the replay.
	b = newBackfill()
	rctx, cancel = context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := b.Run(rctx, first, save); done <- err }()
	b.SetRate(3000) // while it runs: the copiers' shared limiter
	if r := b.limiter.Rate(); r != 3000 {
		t.Errorf("rate after SetRate(3000): %v", r)
	}
	for {
		p := b.Progress()
		if p.Phase != PhaseCopying && p.Apply.Txns >= 30 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("second run ended: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("second run: %v", err)
	}
	second := last()
	if second.Phase == PhaseCopying || *second.Start != *first.Start {
		t.Fatalf("second run saved %+v; first %+v", second, first)
	}
	p := b.Progress()
	t.Logf("killed mid-apply: copied %d of %d rows, applied %d transactions (%d skipped), %d upserts, %d deletes",
		p.Rows, p.Estimate, p.Apply.Txns, p.Apply.Skipped, p.Apply.Upserts, p.Apply.Deletes)

	// 3: resumed again; the writers stop; it catches up.
	b = newBackfill()
	rctx, cancel = context.WithCancel(ctx)
	defer cancel()
	go func() { _, err := b.Run(rctx, second, save); done <- err }()
	time.Sleep(500 * time.Millisecond)
	stopWriters()
	writers.Wait()
	waitCaughtUp(t, ctx, b.CaughtUp)
	for deadline := time.Now().Add(5 * time.Second); last().Phase != PhaseCaughtUp; {
		if time.Now().After(deadline) {
			t.Fatalf("caught up, but the saved state is %+v", last())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(load.errs) > 0 {
		t.Fatalf("writers failed: %v", load.errs)
	}
	t.Logf("writers: %d transactions; third run: %+v", load.ops.Load(), b.Progress().Apply)

	for _, m := range moves {
		sameShard(t, ctx, e, m.Source, m.Target, m.Filter)
		if n := count(t, e.ddb, fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE CRC32(%s) %% 1024 <> ?", m.Target, m.Filter.Column), shard); n != 0 {
			t.Errorf("%s: %d rows of other shards", m.Target, n)
		}
		t.Logf("%s: %d rows", m.Target, count(t, e.ddb, "SELECT COUNT(*) FROM "+m.Target.String()))
	}
	if n := count(t, e.ddb, "SELECT COUNT(*) FROM im_9.im_conv_seq_0282 WHERE conv_id = ?", uint64(math.MaxUint64)); n != 1 {
		t.Errorf("conversation 2^64-1 not on the target")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("third run: %v", err)
	}
}

// A stale chunk cannot bring back a deleted row: rows deleted, changed and
// inserted on the source after the snapshot was taken (so the copy writes
// their old state, which the test sees on the target when the copy ends)
// end as the source has them once the replay has caught up.
func testStaleChunk(t *testing.T, e *env) {
	ctx := testCtx(t)
	e.database(t, "stale")
	e.both(t, imTable(t, "conv_msg", "stale", "conv_msg_0000"))
	const shard = 441
	convs := keysOfShard(shard, 3, 1)
	var rows [][]any
	for i, conv := range append(convs, keysOfShard(shard+1, 3, 1)...) {
		for seq := 1; seq <= 50; seq++ {
			rows = append(rows, []any{conv, seq, i*1000 + seq, 7, 1, "2024-05-01 12:00:00.125"})
		}
	}
	insert(t, e.sdb, "stale.conv_msg_0000", []string{"conv_id", "seq", "msg_id", "sender_uid", "msg_type", "created_at"}, rows)
	f, err := FilterFor("conv_msg", shard)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := e.sides("stale", "conv_msg_0000")
	b, err := NewBackfill(ctx, BackfillConfig{Job: "stale", Shard: shard, Tables: []TableMove{{src, dst, f}},
		Binlog: e.binlogConfig(t), Rate: -1, ChunkRows: 20})
	if err != nil {
		t.Fatal(err)
	}
	c := convs[1]
	rowCount := func(where string) (int64, error) {
		var n int64
		err := e.ddb.QueryRow("SELECT COUNT(*) FROM stale.conv_msg_0000 WHERE conv_id = ? AND "+where, c).Scan(&n)
		return n, err
	}
	stale := []string{"seq BETWEEN 10 AND 19", "seq = 30 AND msg_type = 1", "seq = 99"}
	var mu sync.Mutex
	var atSwitch []int64 // the target's counts of stale when the copy ended
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := b.Run(rctx, BackfillState{}, func(st BackfillState) error {
			switch {
			case st.Start != nil && len(st.Copy) == 0: // P_min saved, nothing copied yet
				for _, q := range []string{
					fmt.Sprintf("DELETE FROM stale.conv_msg_0000 WHERE conv_id = %d AND seq BETWEEN 10 AND 19", c),
					fmt.Sprintf("UPDATE stale.conv_msg_0000 SET msg_type = 9 WHERE conv_id = %d AND seq = 30", c),
					fmt.Sprintf("INSERT INTO stale.conv_msg_0000 VALUES (%d, 99, 99999, 7, 1, NOW(3))", c),
				} {
					if _, err := e.sdb.Exec(q); err != nil {
						return err
					}
				}
			case st.Phase == PhaseApplying && atSwitch == nil:
				mu.Lock()
				defer mu.Unlock()
				for _, w := range stale {
					n, err := rowCount(w)
					if err != nil {
						return err
					}
					atSwitch = append(atSwitch, n)
				}
			}
			return nil
		})
		done <- err
	}()
	waitCaughtUp(t, ctx, b.CaughtUp)
	mu.Lock()
	if fmt.Sprint(atSwitch) != "[10 1 0]" {
		t.Fatalf("when the copy ended the target had %v rows (deleted, old value, inserted later); want [10 1 0]: the stale state", atSwitch)
	}
	mu.Unlock()
	var got []int64
	for _, w := range []string{"seq BETWEEN 10 AND 19", "seq = 30 AND msg_type = 9", "seq = 99"} {
		n, err := rowCount(w)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
	}
	if fmt.Sprint(got) != "[0 1 1]" {
		t.Errorf("after the replay the target has %v (deleted, new value, inserted later); want [0 1 1]", got)
	}
	sameShard(t, ctx, e, src, dst, f)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
}
