package integration

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"
)

// TestKill: KILL [QUERY | CONNECTION] and SHOW PROCESSLIST name Convoy's client connections
// (CONNECTION_ID()), as drivers send it to cancel a statement: the killed
// statement fails with 1317 at once, the connection of a KILL QUERY goes
// on, KILL CONNECTION rolls its transaction back, another account's
// connection is 1095 without admin, and an id Convoy does not have is 1094
// even when a datasource has a thread of that number (before, KILL went to
// the default datasource, where the number named some pooled connection's
// thread: any client could stop any session's statement).
func TestKill(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	app := s.convoy.open(t, "app", "app secret", "im")
	conn := func(db *sql.DB) (*sql.Conn, uint64) {
		t.Helper()
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		var id uint64
		if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			t.Fatal(err)
		}
		return c, id
	}
	// run starts a statement on c and returns its outcome when it ends.
	run := func(c *sql.Conn, q string, args ...any) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := c.ExecContext(ctx, q, args...)
			done <- err
		}()
		return done
	}
	// running waits until a datasource runs a statement starting with q and
	// returns its thread id there.
	direct := []*sql.DB{s.ds[0].Open(t, ""), s.ds[1].Open(t, "")}
	running := func(q string) uint64 {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			for _, d := range direct {
				var id uint64
				err := d.QueryRowContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE ? ORDER BY ID LIMIT 1", q+"%").Scan(&id)
				if err == nil {
					return id
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%q never ran on the datasource", q)
		return 0
	}
	within := func(done <-chan error, d time.Duration, what string) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(d):
			t.Fatalf("%s: still running after %s", what, d)
			return nil
		}
	}

	victim, victimID := conn(app)
	killer, _ := conn(app)
	bystander, _ := conn(s.convoy.open(t, "convoy", "convoy", "im"))

	// The bystander's statement runs on a pooled backend thread; KILL QUERY
	// of that thread's number through Convoy must not reach it.
	byDone := run(bystander, "SELECT SLEEP(3) AS bystander")
	thread := running("SELECT SLEEP(3) AS bystander")
	if _, err := killer.ExecContext(ctx, "KILL QUERY "+uitoa(thread)); errno(err) != 1094 {
		t.Errorf("KILL QUERY of a datasource thread id (%d): %v, want 1094", thread, err)
	}

	// KILL QUERY: the victim's statement fails at once with 1317, its
	// connection goes on; the bystander's statement is untouched.
	start := time.Now()
	done := run(victim, "SELECT SLEEP(30) AS victim")
	running("SELECT SLEEP(30) AS victim")

	// SHOW PROCESSLIST lists Convoy's connections: the account's own (all
	// of them for an admin), the running statement in Info.
	procs := func(c *sql.Conn, q string) map[uint64][]string {
		t.Helper()
		rows, err := c.QueryContext(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		if cols, _ := rows.Columns(); len(cols) != 9 || cols[0] != "Id" || cols[7] != "Info" {
			t.Fatalf("%s: columns %v", q, cols)
		}
		out := map[uint64][]string{}
		for rows.Next() {
			var id uint64
			var user, host, command, tm string
			var db, state, info sql.NullString
			var progress float64
			if err := rows.Scan(&id, &user, &host, &db, &command, &tm, &state, &info, &progress); err != nil {
				t.Fatal(err)
			}
			out[id] = []string{user, command, info.String, db.String}
		}
		return out
	}
	mine := procs(killer, "SHOW FULL PROCESSLIST")
	if v := mine[victimID]; len(v) == 0 || v[0] != "app" || v[1] != "Query" || v[2] != "SELECT SLEEP(30) AS victim" || v[3] != "im" {
		t.Errorf("the victim in app's process list: %q (list %v)", v, mine)
	}
	for id, v := range mine {
		if v[0] != "app" {
			t.Errorf("app's process list shows connection %d of %q", id, v[0])
		}
	}
	all := procs(bystander, "SHOW PROCESSLIST")
	if len(all) <= len(mine) || all[victimID] == nil {
		t.Errorf("an admin's process list (%d connections) should hold app's %d and its own: %v", len(all), len(mine), all)
	}

	// information_schema.PROCESSLIST is the same list, the client's
	// conditions and order applied as written (tools read it, e.g.
	// phpMyAdmin); performance_schema's threads and events are the
	// datasources' own (every session is one backend account there): an
	// admin's only.
	var isUser, isInfo, isCommand string
	if err := killer.QueryRowContext(ctx, "SELECT p.USER, p.INFO, p.COMMAND FROM INFORMATION_SCHEMA.processlist AS p WHERE p.ID = ?", victimID).Scan(&isUser, &isInfo, &isCommand); err != nil ||
		isUser != "app" || isInfo != "SELECT SLEEP(30) AS victim" || isCommand != "Query" {
		t.Errorf("the victim in information_schema.PROCESSLIST: %q %q %q (%v)", isUser, isInfo, isCommand, err)
	}
	var isMine, isAll int
	if err := killer.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER <> 'app'").Scan(&isMine); err != nil || isMine != 0 {
		t.Errorf("app's information_schema.PROCESSLIST holds %d connections of other accounts (%v)", isMine, err)
	}
	if err := bystander.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER IN ('app', 'convoy') AND TIME_MS >= 0").Scan(&isAll); err != nil || isAll != len(all) {
		t.Errorf("an admin's information_schema.PROCESSLIST: %d connections (%v), SHOW PROCESSLIST %d", isAll, err, len(all))
	}
	for _, q := range []string{"SELECT COUNT(*) FROM performance_schema.threads", "SELECT * FROM performance_schema.events_statements_current"} {
		if _, err := killer.ExecContext(ctx, q); errno(err) != 1227 {
			t.Errorf("app: %s: %v, want 1227", q, err)
		}
	}

	if _, err := killer.ExecContext(ctx, "KILL QUERY "+uitoa(victimID)); err != nil {
		t.Fatalf("KILL QUERY %d: %v", victimID, err)
	}
	if err := within(done, 10*time.Second, "the killed statement"); errno(err) != 1317 {
		t.Errorf("the killed statement: %v, want 1317", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the killed statement took %s", d)
	}
	var one int
	if err := victim.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Errorf("the connection after KILL QUERY: %d, %v", one, err)
	}
	if err := within(byDone, 10*time.Second, "the bystander's statement"); err != nil {
		t.Errorf("the bystander's statement: %v, want it to finish", err)
	}

	// Another account's connection: 1095 for an account without admin,
	// done for an admin; unknown ids 1094.
	_, byID := conn(s.convoy.open(t, "convoy", "convoy", "im"))
	if _, err := killer.ExecContext(ctx, "KILL QUERY "+uitoa(byID)); errno(err) != 1095 {
		t.Errorf("app killing convoy's connection: %v, want 1095", err)
	}
	if _, err := killer.ExecContext(ctx, "KILL 4000000000"); errno(err) != 1094 {
		t.Errorf("KILL of an unknown id: %v, want 1094", err)
	}

	// KILL QUERY mid-transaction (docs/sql-reference.md): the statement stops with 1317,
	// the transaction stays open with what it did before, as on MariaDB,
	// and commits (before, the backend connection was dropped: the
	// transaction was rolled back under the client).
	if _, err := victim.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := victim.ExecContext(ctx, "INSERT INTO im_conv_seq (conv_id, max_seq) VALUES (9202, 1)"); err != nil {
		t.Fatal(err)
	}
	done = run(victim, "SELECT SLEEP(30) AS in_txn")
	running("SELECT SLEEP(30) AS in_txn")
	if _, err := killer.ExecContext(ctx, "KILL QUERY "+uitoa(victimID)); err != nil {
		t.Fatalf("KILL QUERY %d in a transaction: %v", victimID, err)
	}
	if err := within(done, 10*time.Second, "the statement killed in a transaction"); errno(err) != 1317 {
		t.Errorf("the statement killed in a transaction: %v, want 1317", err)
	}
	if _, err := victim.ExecContext(ctx, "UPDATE im_conv_seq SET max_seq = 2 WHERE conv_id = 9202"); err != nil {
		t.Errorf("the transaction after KILL QUERY: %v", err)
	}
	if _, err := victim.ExecContext(ctx, "COMMIT"); err != nil {
		t.Errorf("COMMIT after KILL QUERY: %v", err)
	}
	var kept int
	if err := app.QueryRowContext(ctx, "SELECT max_seq FROM im_conv_seq WHERE conv_id = 9202").Scan(&kept); err != nil || kept != 2 {
		t.Errorf("the transaction's row after KILL QUERY and COMMIT: %d (%v), want 2", kept, err)
	}

	// KILL CONNECTION mid-transaction: the victim's connection ends and its
	// uncommitted insert is rolled back.
	if _, err := victim.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := victim.ExecContext(ctx, "INSERT INTO im_conv_seq (conv_id, max_seq) VALUES (9201, 1)"); err != nil {
		t.Fatal(err)
	}
	admin, _ := conn(s.convoy.open(t, "convoy", "convoy", "im"))
	if _, err := admin.ExecContext(ctx, "KILL CONNECTION "+uitoa(victimID)); err != nil {
		t.Fatalf("admin KILL CONNECTION: %v", err)
	}
	if err := victim.QueryRowContext(ctx, "SELECT 1").Scan(&one); err == nil {
		t.Errorf("the killed connection still answers")
	}
	var n int
	if err := app.QueryRowContext(ctx, "SELECT COUNT(*) FROM im_conv_seq WHERE conv_id = 9201").Scan(&n); err != nil || n != 0 {
		t.Errorf("the killed transaction's row: %d (%v), want rolled back", n, err)
	}
	if p := s.convoy.panics(); len(p) > 0 {
		t.Errorf("convoy panicked: %v", p)
	}
}

func uitoa(v uint64) string { return strconv.FormatUint(v, 10) }
