package integration

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/go-sql-driver/mysql"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/search"
)

// searchModel is what the test wrote through Convoy: the oracle of every
// msg_search answer.
type searchModel struct {
	members map[uint64]map[uint64]bool // uid -> conversations
	msgs    map[uint64]*searchMsg
	convs   []uint64
	users   []uint64
	nextID  uint64
}

type searchMsg struct {
	id, conv, seq uint64
	created       time.Time
	text          string
	gone          bool // deleted or recalled
}

const searchHan = "的一是了我不人在他有这个上们来到时大地为子中你说生国年着就那和要她出也得里后自以会家可下而过天去能对小多然于心学么之都好看起发当没成只如事把还用"

var searchWords = strings.Fields("hello world meeting Lunch project deadline review invoice order payment thanks photo urgent weekend coffee deploy release")

func searchText(r *rand.Rand) string {
	rs := []rune(searchHan)
	var b strings.Builder
	for i := range 1 + r.IntN(5) {
		if i > 0 {
			b.WriteString([]string{" ", "，", "。", "! "}[r.IntN(4)])
		}
		if r.IntN(3) == 0 {
			b.WriteString(searchWords[r.IntN(len(searchWords))])
			continue
		}
		for range 1 + r.IntN(8) {
			b.WriteRune(rs[r.IntN(len(rs))])
		}
	}
	return b.String()
}

// oracle answers a search from the model: the uid's conversations, live
// messages matching, newest first (then msg_id), limited.
func (m *searchModel) oracle(uid uint64, q string, conv uint64, limit int) []string {
	mt, err := search.NewMatcher(q)
	if err != nil {
		return nil
	}
	var hits []*searchMsg
	for _, msg := range m.msgs {
		if msg.gone || !m.members[uid][msg.conv] || conv != 0 && msg.conv != conv || !mt.Match(msg.text) {
			continue
		}
		hits = append(hits, msg)
	}
	slices.SortFunc(hits, func(a, b *searchMsg) int {
		if c := b.created.Compare(a.created); c != 0 {
			return c
		}
		if a.id > b.id {
			return -1
		}
		return 1
	})
	var out []string
	for _, h := range hits[:min(len(hits), limit)] {
		out = append(out, fmt.Sprintf("%d/%d/%d/%s", h.id, h.conv, h.seq, h.created.Format("2006-01-02 15:04:05.000")))
	}
	return out
}

const searchSQL = "SELECT msg_id, conv_id, seq, created_at FROM msg_search WHERE uid = ? AND MATCH(text) AGAINST (?) ORDER BY created_at DESC LIMIT ?"
const searchConvSQL = "SELECT msg_id, conv_id, seq, created_at FROM msg_search WHERE uid = ? AND MATCH(text) AGAINST (?) AND conv_id = ? ORDER BY created_at DESC LIMIT ?"

func runSearch(t *testing.T, db *sql.DB, uid uint64, q string, conv uint64, limit int) []string {
	t.Helper()
	var rows *sql.Rows
	var err error
	if conv != 0 {
		rows, err = db.Query(searchConvSQL, uid, q, conv, limit)
	} else {
		rows, err = db.Query(searchSQL, uid, q, limit)
	}
	if err != nil {
		t.Fatalf("search uid %d %q: %v", uid, q, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, c, seq uint64
		var at string
		if err := rows.Scan(&id, &c, &seq, &at); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d/%d/%d/%s", id, c, seq, at))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// send writes one message through Convoy: the conv_msg row (Convoy
// allocates the seq) and the body, in one transaction or in two statements.
func (m *searchModel) send(t *testing.T, db *sql.DB, r *rand.Rand, conv uint64, created time.Time, text string) *searchMsg {
	t.Helper()
	m.nextID += 1 + uint64(r.IntN(3))
	msg := &searchMsg{id: m.nextID, conv: conv, created: created.UTC().Truncate(time.Millisecond), text: text}
	at := msg.created.Format("2006-01-02 15:04:05.000")
	var ex interface {
		Exec(string, ...any) (sql.Result, error)
	} = db
	var tx *sql.Tx
	if r.IntN(2) == 0 {
		var err error
		if tx, err = db.Begin(); err != nil {
			t.Fatal(err)
		}
		ex = tx
	}
	res, err := ex.Exec("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, ?)", conv, msg.id, at)
	if err != nil {
		t.Fatal(err)
	}
	seq, _ := res.LastInsertId()
	msg.seq = uint64(seq)
	if _, err := ex.Exec("INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, 1, 1, ?, ?)",
		msg.id, conv, []byte(text), at); err != nil {
		t.Fatal(err)
	}
	if tx != nil {
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	m.msgs[msg.id] = msg
	return msg
}

// TestSearchThroughConvoy runs message search through a real Convoy
// process against the real MariaDB binlog feed, once per engine: results
// equal the model's brute force for random users with random memberships
// (text and prepared statements), a user who left a conversation no longer
// finds it, recalls and deletes disappear, a fresh message is found before
// any index has it, and a SIGKILLed Convoy resumes its feed from the
// checkpoint without a gap.
func TestSearchThroughConvoy(t *testing.T) {
	s := newStack(t)
	for round, engine := range []string{"bleve", "sphinx"} {
		t.Run(engine, func(t *testing.T) {
			cfg := fmt.Sprintf("search:\n  enabled: true\n  engine: bleve\n  dir: %s\n  runner_ttl: 2s", t.TempDir())
			if engine == "sphinx" {
				addrs := testsvc.StartSphinx(t, 2).Addrs()
				cfg = fmt.Sprintf("search:\n  enabled: true\n  engine: sphinx\n  sphinx:\n    partitions: [%s]\n  runner_ttl: 2s", strings.Join(addrs, ", "))
			}
			p := startConvoy(t, s.etcd.Endpoints(), cfg)
			t.Cleanup(func() {
				if t.Failed() {
					b, _ := os.ReadFile(p.logPath)
					for _, l := range strings.Split(string(b), "\n") {
						if strings.Contains(l, "search") || strings.Contains(l, "binlog") {
							t.Log(l)
						}
					}
				}
			})
			prepared := p.open(t, "convoy", "convoy", "im")
			text, err := sql.Open("mysql", p.dsn("convoy", "convoy", "im")+"&interpolateParams=true")
			if err != nil {
				t.Fatal(err)
			}
			defer text.Close()

			r := rand.New(rand.NewPCG(uint64(round), 99))
			m := &searchModel{members: map[uint64]map[uint64]bool{}, msgs: map[uint64]*searchMsg{}, nextID: uint64(round+1) << 40}
			for i := range 10 {
				m.convs = append(m.convs, uint64(round)*1000+100+uint64(i)*37)
			}
			for i := range 8 {
				uid := uint64(round)*1000 + 500 + uint64(i)*11
				m.users = append(m.users, uid)
				m.members[uid] = map[uint64]bool{}
				for _, c := range m.convs {
					if r.IntN(3) == 0 {
						m.members[uid][c] = true
						mustExec(t, prepared, "INSERT INTO im_conv_member (uid, conv_id, updated_at) VALUES (?, ?, NOW(3))", uid, c)
					}
				}
			}
			old := time.Now().Add(-time.Hour)
			for i := range 300 {
				m.send(t, prepared, r, m.convs[r.IntN(len(m.convs))], old.Add(time.Duration(i)*time.Second), searchText(r))
			}
			// The index has everything once every conversation's last
			// message (a word nothing else has) is found by a member.
			sentinels := func(tag string) {
				t.Helper()
				for i, c := range m.convs {
					// The round in the word: uid 1 is a member of the
					// conversations of every round.
					w := fmt.Sprintf("zz%s%dr%d", tag, i, round)
					msg := m.send(t, prepared, r, c, old.Add(time.Duration(400+i)*time.Second), w)
					m.members[1][c] = true
					mustExec(t, prepared, "INSERT IGNORE INTO im_conv_member (uid, conv_id, updated_at) VALUES (1, ?, NOW(3))", c)
					waitFor(t, "the index to have "+w, 20*time.Second, func() bool {
						got := runSearch(t, prepared, 1, w, 0, 5)
						return len(got) == 1 && strings.HasPrefix(got[0], fmt.Sprintf("%d/", msg.id))
					})
				}
			}
			m.members[1] = map[uint64]bool{}
			sentinels("a")

			compare := func(n int) {
				t.Helper()
				msgs := make([]*searchMsg, 0, len(m.msgs))
				for _, msg := range m.msgs {
					msgs = append(msgs, msg)
				}
				slices.SortFunc(msgs, func(a, b *searchMsg) int { return cmp.Compare(a.id, b.id) })
				hits := 0
				for i := range n {
					uid := m.users[r.IntN(len(m.users))]
					// Mostly a piece of a message the user may find.
					var own []*searchMsg
					for _, msg := range msgs {
						if m.members[uid][msg.conv] {
							own = append(own, msg)
						}
					}
					if len(own) == 0 || r.IntN(4) == 0 {
						own = msgs
					}
					sample := own[r.IntN(len(own))].text
					rs := []rune(sample)
					k := r.IntN(len(rs))
					q := string(rs[k : k+min(1+r.IntN(3), len(rs)-k)])
					var conv uint64
					if r.IntN(3) == 0 {
						conv = m.convs[r.IntN(len(m.convs))]
					}
					limit := []int{5, 20, 100}[r.IntN(3)]
					want := m.oracle(uid, q, conv, limit)
					db := prepared
					if i%2 == 1 {
						db = text
					}
					got := runSearch(t, db, uid, q, conv, limit)
					if !slices.Equal(got, want) {
						t.Fatalf("uid %d %q conv %d limit %d (prepared %v):\n got %q\nwant %q", uid, q, conv, limit, i%2 == 0, got, want)
					}
					for _, g := range got {
						var id, c uint64
						fmt.Sscanf(g, "%d/%d/", &id, &c)
						if !m.members[uid][c] {
							t.Fatalf("uid %d got message %d of conversation %d, not one of its own", uid, id, c)
						}
					}
					if len(got) > 0 {
						hits++
					}
				}
				if hits < n/8 {
					t.Fatalf("only %d of %d searches had hits", hits, n)
				}
			}
			compare(120)

			// Leaving a conversation: the next search no longer sees it.
			for _, uid := range m.users {
				for c := range m.members[uid] {
					mustExec(t, prepared, "DELETE FROM im_conv_member WHERE uid = ? AND conv_id = ?", uid, c)
					delete(m.members[uid], c)
					break
				}
			}
			compare(60)

			// Recalls (msg_type changed) and deletes of old messages show
			// once the index has them; of a fresh message, at once.
			var gone []*searchMsg
			for _, msg := range m.msgs {
				if len(gone) == 6 {
					break
				}
				if !msg.gone && !strings.HasPrefix(msg.text, "zz") {
					gone = append(gone, msg)
				}
			}
			for i, msg := range gone {
				if i%2 == 0 {
					mustExec(t, prepared, "UPDATE msg_content SET msg_type = 99 WHERE conv_id = ? AND msg_id = ?", msg.conv, msg.id)
				} else {
					mustExec(t, prepared, "DELETE FROM conv_msg WHERE conv_id = ? AND seq = ?", msg.conv, msg.seq)
					mustExec(t, prepared, "DELETE FROM msg_content WHERE conv_id = ? AND msg_id = ?", msg.conv, msg.id)
				}
				msg.gone = true
			}
			sentinels("b")
			compare(60)
			uid := m.users[0]
			conv := m.convs[0]
			m.members[uid][conv] = true
			mustExec(t, prepared, "INSERT IGNORE INTO im_conv_member (uid, conv_id, updated_at) VALUES (?, ?, NOW(3))", uid, conv)
			fresh := m.send(t, prepared, r, conv, time.Now(), "刚发的消息 freshword")
			if got := runSearch(t, prepared, uid, "freshword", 0, 5); len(got) != 1 || !strings.HasPrefix(got[0], fmt.Sprint(fresh.id)) {
				t.Fatalf("a message sent a moment ago: %q", got)
			}
			mustExec(t, prepared, "UPDATE msg_content SET msg_type = 99 WHERE conv_id = ? AND msg_id = ?", conv, fresh.id)
			fresh.gone = true
			if got := runSearch(t, prepared, uid, "freshword", 0, 5); len(got) != 0 {
				t.Fatalf("a fresh message recalled, the next search still finds it: %q", got)
			}

			// A proxy whose index nobody feeds finds the fresh window only.
			q := startConvoy(t, s.etcd.Endpoints(), fmt.Sprintf("search:\n  enabled: true\n  engine: bleve\n  dir: %s\n  run_indexer: false", t.TempDir()))
			qdb := q.open(t, "convoy", "convoy", "im")
			young := m.send(t, prepared, r, conv, time.Now(), "indexerpaused 新消息")
			if got := runSearch(t, qdb, uid, "indexerpaused", 0, 5); len(got) != 1 || !strings.HasPrefix(got[0], fmt.Sprint(young.id)) {
				t.Fatalf("the fresh window without an index feed: %q", got)
			}
			if got := runSearch(t, qdb, 1, fmt.Sprintf("zza0r%d", round), 0, 5); len(got) != 0 {
				t.Fatalf("an unfed index answered for an old message: %q", got)
			}
			q.kill()

			// SIGKILL in the middle of writes; the restarted process
			// resumes its feed from the checkpoint.
			for i := range 60 {
				if i == 20 {
					p.kill()
					p.start(t)
				}
				m.send(t, prepared, r, m.convs[r.IntN(len(m.convs))], old.Add(time.Duration(500+i)*time.Second), searchText(r))
			}
			sentinels("c")
			compare(80)

			// libmariadb's server-side prepared statements (Ruby mysql2)
			// check the PREPARE counts and read binary rows; a Time
			// parameter travels as a binary DATETIME.
			rb := `
require "mysql2"
host, port, uid, q, since = ARGV
c = Mysql2::Client.new(host: host, port: port.to_i, username: "convoy", password: "convoy", database: "im", encoding: "utf8mb4")
st = c.prepare("SELECT msg_id, conv_id, seq, created_at FROM msg_search WHERE uid = ? AND MATCH(text) AGAINST (?) AND created_at >= ? ORDER BY created_at DESC LIMIT ?")
t = Time.at(since.to_i).utc
st.execute(uid.to_i, q, t, 50).each { |r| puts [r["msg_id"], r["conv_id"], r["seq"], r["created_at"].strftime("%F %T.%L")].join("/") }
`
			h, port := hostPort(t, p.addr)
			since := old.Add(100 * time.Second).Truncate(time.Second)
			checked := 0
			for _, uid := range m.users {
				var q string
				for _, msg := range m.msgs {
					// A character (a whole word would be needed otherwise).
					if first := []rune(msg.text)[0]; m.members[uid][msg.conv] && !msg.gone && unicode.Is(unicode.Han, first) {
						q = string(first)
						break
					}
				}
				if q == "" || checked == 3 {
					continue
				}
				checked++
				got := runClient(t, exec.Command("ruby", "-e", rb, h, port, fmt.Sprint(uid), q, fmt.Sprint(since.Unix())), "ruby-mysql2")
				var want []string
				for _, w := range m.oracle(uid, q, 0, 1000) {
					if at, _ := time.Parse("2006-01-02 15:04:05.000", w[strings.LastIndexByte(w, '/')+1:]); !at.Before(since) {
						want = append(want, w)
					}
				}
				if got != strings.Join(want[:min(len(want), 50)], "\n") || got == "" {
					t.Fatalf("ruby mysql2, uid %d %q since %s:\n got %q\nwant %q", uid, q, since, got, want)
				}
			}
			if checked == 0 {
				t.Fatal("no user had a message to search with Ruby mysql2")
			}

			// Refusals are MySQL errors, and the connection stays usable.
			for _, bad := range []struct {
				sql   string
				errno uint16
			}{
				{"SELECT msg_id FROM msg_search WHERE MATCH(text) AGAINST ('x') LIMIT 5", 1235},
				{"SELECT msg_id FROM msg_search WHERE uid = 1 AND MATCH(text) AGAINST ('x') LIMIT 5 OFFSET 5", 1235},
				{"SELECT msg_id FROM msg_search WHERE uid = 1 AND MATCH(text) AGAINST ('x'", 1064},
			} {
				for _, db := range []*sql.DB{prepared, text} {
					_, err := db.Query(bad.sql)
					var me *mysql.MySQLError
					if !errors.As(err, &me) || me.Number != bad.errno || string(me.SQLState[:]) != "42000" {
						t.Fatalf("%s: %v, want errno %d", bad.sql, err, bad.errno)
					}
				}
			}
			if got := runSearch(t, text, 1, fmt.Sprintf("zzc0r%d", round), 0, 5); len(got) != 1 {
				t.Fatalf("after the refusals: %q", got)
			}
		})
	}
}

// TestSearchDirInUse (docs/design.md §9-10): a second `convoy serve` configured with a
// search.dir another one has open (two proxies on one host with the
// default config) exits at start saying so, instead of hanging on the
// index lock while it looks alive.
func TestSearchDirInUse(t *testing.T) {
	s := newStack(t)
	cfg := fmt.Sprintf("search:\n  enabled: true\n  engine: bleve\n  dir: %s", t.TempDir())
	startConvoy(t, s.etcd.Endpoints(), cfg)
	p2 := newConvoyProc(t, s.etcd.Endpoints(), defaultUsers, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, convoyBin, "serve", "--config", p2.cfgPath).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the second convoy serve did not exit within 30 s:\n%s", out)
	}
	if err == nil || !strings.Contains(string(out), "is in use by another Convoy process") {
		t.Fatalf("the second convoy serve: %v\n%s", err, out)
	}
}

// TestSearchStatus (docs/design.md §9-10): SHOW SEARCH STATUS says, per datasource,
// whether the index is built, its checkpoint, which process feeds it and
// (in that process) how far behind it is; a search through a proxy whose
// index is not built (here: one that runs no feed into its own index)
// carries warning 1931 saying so, instead of an answer that looks
// complete.
func TestSearchStatus(t *testing.T) {
	s := newStack(t)
	p1 := startConvoy(t, s.etcd.Endpoints(), fmt.Sprintf("search:\n  enabled: true\n  engine: bleve\n  dir: %s\n  runner_ttl: 2s", t.TempDir()))
	q := startConvoy(t, s.etcd.Endpoints(), fmt.Sprintf("search:\n  enabled: true\n  engine: bleve\n  dir: %s\n  run_indexer: false", t.TempDir()))
	status := func(p *convoyProc) []map[string]string {
		t.Helper()
		var out []map[string]string
		for _, r := range queryRows(t, p.open(t, "convoy", "convoy", "im"), "/*+ convoy SHOW SEARCH STATUS */") {
			m := map[string]string{}
			for i, c := range []string{"datasource", "index", "ready", "checkpoint", "feeder", "behind_seconds"} {
				m[c] = r[i]
			}
			out = append(out, m)
		}
		return out
	}
	var st []map[string]string
	waitFor(t, "every datasource's index built", 30*time.Second, func() bool {
		st = status(p1)
		for _, r := range st {
			if r["ready"] != "yes" {
				return false
			}
		}
		return len(st) == len(s.ds)
	})
	for _, r := range st {
		if r["feeder"] == "" || r["checkpoint"] == "" || r["behind_seconds"] == "" {
			t.Errorf("SHOW SEARCH STATUS row %v: want a feeder, a checkpoint and this process's lag", r)
		}
	}
	for _, r := range status(q) {
		if r["ready"] != "no" || r["behind_seconds"] != "" { // NULL: this process feeds nothing
			t.Errorf("the unfed index: %v", r)
		}
	}
	admin := q.open(t, "convoy", "convoy", "im")
	mustExec(t, admin, "INSERT INTO im_conv_member (uid, conv_id, updated_at) VALUES (5, 77, NOW(3))")
	ctx := context.Background()
	c, err := admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rows, err := c.QueryContext(ctx, searchSQL, 5, "hello", 10)
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	var level, msg string
	var code int
	if err := c.QueryRowContext(ctx, "SHOW WARNINGS").Scan(&level, &code, &msg); err != nil || code != 1931 || !strings.Contains(msg, "still being built") {
		t.Fatalf("a search of an index not built: warning %d %q (%v)", code, msg, err)
	}
}

// TestSearchPaging (docs/design.md §9-10): the pages of a search, through Convoy,
// with the cursor of the previous page's last hit, newest first and
// oldest first, text and prepared, cover every match once in order
// (messages sharing a millisecond included, some inside the fresh window
// and most older); a sender filter and an upper date bound narrow them.
func TestSearchPaging(t *testing.T) {
	s := newStack(t)
	p := startConvoy(t, s.etcd.Endpoints(), fmt.Sprintf("search:\n  enabled: true\n  engine: bleve\n  dir: %s\n  runner_ttl: 2s", t.TempDir()))
	db := p.open(t, "convoy", "convoy", "im")
	const uid, conv = uint64(9), uint64(4343)
	mustExec(t, db, "INSERT INTO im_conv_member (uid, conv_id, updated_at) VALUES (?, ?, NOW(3))", uid, conv)
	type msg struct {
		id     uint64
		at     string
		sender uint64
	}
	var all []msg
	base := time.Now().UTC().Add(-48 * time.Hour)
	for i := range 40 {
		at := base.Add(time.Duration(i/3) * time.Hour) // three share each instant
		if i >= 36 {
			at = time.Now().UTC().Add(-time.Duration(40-i) * time.Second) // inside the fresh window
		}
		m := msg{id: 700_000 + uint64(i)*7%40*1000 + uint64(i), at: at.Format("2006-01-02 15:04:05.000"), sender: 100 + uint64(i%3)}
		mustExec(t, db, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 1, ?)", conv, m.id, m.sender, m.at)
		mustExec(t, db, "INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, ?, 1, ?, ?)", m.id, conv, m.sender, []byte("wombat news"), m.at)
		all = append(all, m)
	}
	slices.SortFunc(all, func(a, b msg) int { return cmp.Or(strings.Compare(b.at, a.at), cmp.Compare(b.id, a.id)) }) // newest first
	waitFor(t, "the index to hold the older messages", 30*time.Second, func() bool {
		var n int
		rows, err := db.Query("SELECT msg_id FROM msg_search WHERE uid = ? AND MATCH(text) AGAINST ('wombat') LIMIT 100", uid)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			n++
		}
		return n == len(all)
	})
	type hit struct {
		id uint64
		at string
	}
	page := func(q string, args ...any) []hit {
		t.Helper()
		rows, err := db.Query(q, args...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		var out []hit
		for rows.Next() {
			var h hit
			if err := rows.Scan(&h.id, &h.at); err != nil {
				t.Fatal(err)
			}
			out = append(out, h)
		}
		return out
	}
	walk := func(asc bool, extra string, extraArgs ...any) []uint64 {
		order, cmpOp := "DESC", "<"
		if asc {
			order, cmpOp = "ASC", ">"
		}
		first := "SELECT msg_id, created_at FROM msg_search WHERE uid = ? AND MATCH(text) AGAINST ('wombat')" + extra +
			" ORDER BY created_at " + order + ", msg_id " + order + " LIMIT 7"
		next := "SELECT msg_id, created_at FROM msg_search WHERE uid = ? AND MATCH(text) AGAINST (?)" + extra +
			" AND (created_at, msg_id) " + cmpOp + " (?, ?) ORDER BY created_at " + order + ", msg_id " + order + " LIMIT 7"
		var got []uint64
		hs := page(first, append([]any{uid}, extraArgs...)...)
		for len(hs) > 0 {
			for _, h := range hs {
				got = append(got, h.id)
			}
			last := hs[len(hs)-1]
			hs = page(next, append(append([]any{uid, "wombat"}, extraArgs...), last.at, last.id)...)
			if len(got) > len(all) {
				t.Fatalf("paging does not end: %v", got)
			}
		}
		return got
	}
	want := func(keep func(msg) bool, asc bool) []uint64 {
		var out []uint64
		for _, m := range all {
			if keep(m) {
				out = append(out, m.id)
			}
		}
		if asc {
			slices.Reverse(out)
		}
		return out
	}
	every := func(msg) bool { return true }
	for _, asc := range []bool{false, true} {
		if got, w := walk(asc, ""), want(every, asc); !slices.Equal(got, w) {
			t.Errorf("pages (asc %v): %v, want %v", asc, got, w)
		}
		if got, w := walk(asc, " AND sender_uid = ?", uint64(101)), want(func(m msg) bool { return m.sender == 101 }, asc); !slices.Equal(got, w) {
			t.Errorf("pages of sender 101 (asc %v): %v, want %v", asc, got, w)
		}
		until := all[10].at
		if got, w := walk(asc, " AND created_at < ?", until), want(func(m msg) bool { return m.at < until }, asc); !slices.Equal(got, w) {
			t.Errorf("pages before %s (asc %v): %v, want %v", until, asc, got, w)
		}
	}
	if _, err := db.Exec("SELECT msg_id FROM msg_search WHERE uid = 9 AND MATCH(text) AGAINST ('x') AND (created_at, msg_id) > ('2026-01-01 00:00:00', 5) LIMIT 5"); errno(err) == 0 {
		t.Error("a cursor against the order (> with newest first) is not refused")
	}
}

// TestSearchSphinxTwoProxies (docs/design.md §9-10): with more than one proxy the
// SphinxQL engine is the shared index. Two Convoy processes point at the
// same searchd: one feeds each datasource's binlog into it (SHOW SEARCH
// STATUS names the same feeder on both), and both answer from it. A
// message written through one is found through the other; recalled
// through the other (its body deleted), it is found through neither
// (search.TestSphinxDeleteDropsText: nor in the index itself).
func TestSearchSphinxTwoProxies(t *testing.T) {
	s := newStack(t)
	sph := testsvc.StartSphinx(t, 2)
	cfg := fmt.Sprintf("search:\n  enabled: true\n  engine: sphinx\n  sphinx:\n    partitions: [%s]\n  runner_ttl: 2s", strings.Join(sph.Addrs(), ", "))
	a, b := startConvoy(t, s.etcd.Endpoints(), cfg), startConvoy(t, s.etcd.Endpoints(), cfg)
	da, db := a.open(t, "convoy", "convoy", "im"), b.open(t, "convoy", "convoy", "im")
	feeders := func(p *convoyProc) map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, r := range queryRows(t, p.open(t, "convoy", "convoy", "im"), "/*+ convoy SHOW SEARCH STATUS */") {
			if r[2] == "yes" {
				out[r[0]] = r[4]
			}
		}
		return out
	}
	var fa map[string]string
	waitFor(t, "both proxies to see every datasource's shared index ready", 30*time.Second, func() bool {
		fa = feeders(a)
		return len(fa) == len(s.ds) && len(feeders(b)) == len(s.ds)
	})
	if fb := feeders(b); fmt.Sprint(fa) != fmt.Sprint(fb) {
		t.Errorf("the two proxies name different feeders of the shared index: %v and %v", fa, fb)
	}

	const uid, conv = 4242, 4243
	mustExec(t, da, "INSERT INTO im_conv_member (uid, conv_id, updated_at) VALUES (?, ?, NOW(3))", uid, conv)
	old := time.Now().Add(-time.Hour).UTC().Format("2006-01-02 15:04:05.000") // outside the fresh window: only the index finds it
	send := func(p *sql.DB, id uint64, text string) {
		t.Helper()
		mustExec(t, p, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, ?)", conv, id, old)
		mustExec(t, p, "INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, 1, 1, ?, ?)", id, conv, text, old)
	}
	found := func(p *sql.DB, word string) string {
		var ids []string
		for _, h := range runSearch(t, p, uid, word, 0, 10) {
			ids = append(ids, strings.SplitN(h, "/", 2)[0])
		}
		return strings.Join(ids, ",")
	}
	send(da, 91001, "zzshared 周末一起吃饭")
	send(da, 91002, "zzshared 留下的话")
	waitFor(t, "the shared index to have both messages, through the other proxy", 20*time.Second, func() bool {
		return found(db, "zzshared") == "91002,91001"
	})
	if got := found(da, "吃饭"); got != "91001" {
		t.Errorf("through the proxy that wrote it: %q, want 91001", got)
	}
	// Recalled through the other proxy: its body deleted.
	mustExec(t, db, "DELETE FROM msg_content WHERE conv_id = ? AND msg_id = ?", conv, 91001)
	waitFor(t, "the recalled message to leave the shared index", 20*time.Second, func() bool {
		return found(da, "zzshared") == "91002" && found(db, "zzshared") == "91002"
	})
	if got := found(da, "吃饭") + found(db, "吃饭"); got != "" {
		t.Errorf("the recalled message's words still found: %q", got)
	}
}

// TestSearchCounts (docs/design.md §9-10): per-conversation hit counts of a search,
// `SELECT conv_id, COUNT(*) FROM msg_search ... GROUP BY conv_id`, text and
// prepared: every match of the searching user's conversations (the index's
// older ones and the fresh window's from MySQL), the most hits first or by
// conv_id, filters applied, other users' conversations never counted.
func TestSearchCounts(t *testing.T) {
	s := newStack(t)
	p := startConvoy(t, s.etcd.Endpoints(), fmt.Sprintf("search:\n  enabled: true\n  engine: bleve\n  dir: %s\n  runner_ttl: 2s", t.TempDir()))
	db := p.open(t, "convoy", "convoy", "im")
	const uid = uint64(12)
	convA, convB, convC, convD := uint64(5101), uint64(5102), uint64(5103), uint64(5104)
	for _, c := range []uint64{convA, convB, convC} {
		mustExec(t, db, "INSERT INTO im_conv_member (uid, conv_id, updated_at) VALUES (?, ?, NOW(3))", uid, c)
	}
	id := uint64(900_000)
	send := func(conv, sender uint64, text string, at time.Time) {
		t.Helper()
		id++
		ts := at.UTC().Format("2006-01-02 15:04:05.000")
		mustExec(t, db, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 1, ?)", conv, id, sender, ts)
		mustExec(t, db, "INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, ?, 1, ?, ?)", id, conv, sender, []byte(text), ts)
	}
	old := time.Now().Add(-24 * time.Hour)
	for i := range 3 {
		send(convA, 1, "wombat sighting", old.Add(time.Duration(i)*time.Minute))
	}
	send(convA, 2, "koala only", old)
	send(convB, 2, "a wombat", old)
	send(convB, 1, "wombat again", old.Add(time.Minute))
	send(convC, 1, "nothing here", old)
	for range 4 {
		send(convD, 1, "wombat elsewhere", old) // not uid's conversation
	}
	send(convA, 2, "fresh wombat", time.Now().Add(-10*time.Second)) // the fresh window
	send(convA, 1, "wombat fresh too", time.Now().Add(-5*time.Second))
	counts := func(q string, args ...any) [][2]any {
		t.Helper()
		var out [][2]any
		for _, r := range queryRows(t, db, q, args...) {
			c, err1 := strconv.ParseUint(r[0], 10, 64)
			n, err2 := strconv.ParseUint(r[1], 10, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: row %v", q, r)
			}
			out = append(out, [2]any{c, n})
		}
		return out
	}
	const all = "SELECT conv_id, COUNT(*) FROM msg_search WHERE uid = %d AND MATCH(text) AGAINST ('wombat') GROUP BY conv_id"
	want := fmt.Sprint([][2]any{{convA, uint64(5)}, {convB, uint64(2)}})
	waitFor(t, "the index to hold the older messages", 30*time.Second, func() bool {
		return fmt.Sprint(counts(fmt.Sprintf(all, uid))) == want
	})
	if got := counts("SELECT conv_id, COUNT(*) FROM msg_search WHERE uid = ? AND MATCH(text) AGAINST (?) GROUP BY conv_id", uid, "wombat"); fmt.Sprint(got) != want {
		t.Fatalf("prepared: %v, want %v", got, want)
	}
	// The columns are named as MariaDB names them: as written, or the alias.
	for q, want := range map[string]string{
		fmt.Sprintf(all, uid): "[conv_id COUNT(*)]",
		fmt.Sprintf("SELECT conv_id, COUNT(*) AS hits FROM msg_search WHERE uid = %d AND MATCH(text) AGAINST ('wombat') GROUP BY conv_id", uid): "[conv_id hits]",
	} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		cols, err := rows.Columns()
		rows.Close()
		if err != nil || fmt.Sprint(cols) != want {
			t.Fatalf("%s: columns %v, want %s", q, cols, want)
		}
	}
	for _, c := range []struct {
		q    string
		want [][2]any
	}{
		{fmt.Sprintf("SELECT conv_id, COUNT(*) AS hits FROM msg_search WHERE uid = %d AND MATCH(text) AGAINST ('wombat') GROUP BY conv_id ORDER BY conv_id DESC LIMIT 1", uid), [][2]any{{convB, uint64(2)}}},
		{fmt.Sprintf("SELECT conv_id, COUNT(*) FROM msg_search WHERE uid = %d AND MATCH(text) AGAINST ('wombat') AND sender_uid = 2 GROUP BY conv_id", uid), [][2]any{{convA, uint64(1)}, {convB, uint64(1)}}},
		{fmt.Sprintf("SELECT conv_id, COUNT(*) FROM msg_search WHERE uid = %d AND MATCH(text) AGAINST ('wombat') AND conv_id = %d GROUP BY conv_id", uid, convD), nil},
		{fmt.Sprintf("SELECT conv_id, COUNT(*) FROM msg_search WHERE uid = %d AND MATCH(text) AGAINST ('koala') GROUP BY conv_id ORDER BY COUNT(*) DESC", uid), [][2]any{{convA, uint64(1)}}},
	} {
		if got := counts(c.q); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v, want %v", c.q, got, c.want)
		}
	}
	for _, q := range []string{
		"SELECT conv_id, seq, COUNT(*) FROM msg_search WHERE uid = 12 AND MATCH(text) AGAINST ('wombat') GROUP BY conv_id",
		"SELECT conv_id, COUNT(*) FROM msg_search WHERE uid = 12 AND MATCH(text) AGAINST ('wombat') GROUP BY sender_uid",
		"SELECT conv_id, COUNT(*) FROM msg_search WHERE uid = 12 AND MATCH(text) AGAINST ('wombat') AND (created_at, msg_id) < ('2030-01-01', 1) GROUP BY conv_id",
	} {
		if _, err := db.Exec(q); errno(err) != 1235 {
			t.Errorf("%s: %v, want 1235", q, err)
		}
	}
}
