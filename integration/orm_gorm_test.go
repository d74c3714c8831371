package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// GORM models on the logical tables of schema/im.sql. Types, sizes,
// defaults, comments and indexes match the schema exactly, so AutoMigrate
// finds nothing to change on MariaDB: through Convoy it must not either.
// Every time is set by the program (or by the fixed NowFunc), so both runs
// store the same values.

// gormConvMsg is conv_msg: sharded by conv_id, primary key (conv_id, seq).
type gormConvMsg struct {
	ConvID    uint64    `gorm:"primaryKey;autoIncrement:false;comment:分片键"`
	Seq       uint64    `gorm:"primaryKey;autoIncrement:false;comment:会话内单调递增序号（08 章）"`
	MsgID     uint64    `gorm:"not null;uniqueIndex:uk_msg"`
	SenderUID uint64    `gorm:"not null"`
	MsgType   uint8     `gorm:"not null"`
	CreatedAt time.Time `gorm:"not null;precision:3"`
}

func (gormConvMsg) TableName() string { return "conv_msg" }

// gormMsgContent is msg_content: sharded by conv_id, primary key msg_id.
type gormMsgContent struct {
	MsgID     uint64    `gorm:"primaryKey;autoIncrement:false;comment:全局消息 ID（08 章）"`
	ConvID    uint64    `gorm:"not null;index:idx_conv,priority:1"`
	SenderUID uint64    `gorm:"not null"`
	MsgType   uint8     `gorm:"not null;comment:1=text 2=image 3=file ..."`
	Content   []byte    `gorm:"type:varbinary(4096);not null;comment:加密载荷，含 @ 与引用元信息"`
	CreatedAt time.Time `gorm:"not null;precision:3;index:idx_conv,priority:2"`
}

func (gormMsgContent) TableName() string { return "msg_content" }

// gormConvSeq is im_conv_seq: sharded by conv_id.
type gormConvSeq struct {
	ConvID    uint64 `gorm:"primaryKey;autoIncrement:false;comment:分片键"`
	MaxSeq    uint64 `gorm:"not null;default:0;comment:会话当前最大 seq，发号用"`
	MemberCnt uint32 `gorm:"not null;default:0"`
}

func (gormConvSeq) TableName() string { return "im_conv_seq" }

// gormConvMember is im_conv_member: sharded by uid.
type gormConvMember struct {
	UID         uint64    `gorm:"column:uid;primaryKey;autoIncrement:false;comment:分片键;index:idx_uid_updated,priority:1"`
	ConvID      uint64    `gorm:"primaryKey;autoIncrement:false"`
	LastReadSeq uint64    `gorm:"not null;default:0"`
	Mute        uint8     `gorm:"not null;default:0;comment:0=normal 1=muted"`
	UpdatedAt   time.Time `gorm:"not null;precision:3;index:idx_uid_updated,priority:2"`
}

func (gormConvMember) TableName() string { return "im_conv_member" }

// gormInbox is im_inbox: sharded by uid, primary key (uid, conv_id, seq).
type gormInbox struct {
	UID      uint64    `gorm:"column:uid;primaryKey;autoIncrement:false;comment:分片键"`
	ConvID   uint64    `gorm:"primaryKey;autoIncrement:false"`
	Seq      uint64    `gorm:"primaryKey;autoIncrement:false"`
	MsgID    uint64    `gorm:"not null"`
	SendTime time.Time `gorm:"not null;precision:3;index:idx_send_time"`
}

func (gormInbox) TableName() string { return "im_inbox" }

// gormNote is an unsharded table AutoMigrate creates, with an
// auto-increment key: GORM's MySQL driver inserts it with RETURNING `id`
// when the server says MariaDB >= 10.5.
type gormNote struct {
	ID        uint64    `gorm:"primaryKey"`
	ConvID    uint64    `gorm:"not null;index"`
	Title     string    `gorm:"size:64;not null"`
	Body      *string   `gorm:"type:text"`
	CreatedAt time.Time `gorm:"precision:3"`
}

func (gormNote) TableName() string { return "gorm_note" }

// schemaTabler is a GORM model that names its table.
type schemaTabler interface{ TableName() string }

// gormNow is GORM's clock in both runs (CreatedAt / UpdatedAt).
var gormNow = time.Date(2026, 4, 1, 12, 0, 0, 123000000, time.UTC)

// gormSQLRecorder is a GORM logger that keeps the SQL of every statement,
// so a step's report can show what Convoy was sent and migration steps can
// show the DDL they issued. GORM's log inlines the values; on the wire they
// are parameters of server-side prepared statements (interpolateParams is
// off), so a logged "LIMIT 1" was sent as "LIMIT ?".
type gormSQLRecorder struct {
	mu   sync.Mutex
	stmt []string
}

func (r *gormSQLRecorder) LogMode(logger.LogLevel) logger.Interface { return r }
func (r *gormSQLRecorder) Info(context.Context, string, ...any)     {}
func (r *gormSQLRecorder) Warn(context.Context, string, ...any)     {}
func (r *gormSQLRecorder) Error(context.Context, string, ...any)    {}
func (r *gormSQLRecorder) Trace(_ context.Context, _ time.Time, fc func() (string, int64), err error) {
	sql, _ := fc()
	if err != nil {
		sql += "  -> " + err.Error()
	}
	r.mu.Lock()
	r.stmt = append(r.stmt, sql)
	r.mu.Unlock()
}

// since returns the statements recorded after the first n.
func (r *gormSQLRecorder) since(n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.stmt[n:]...)
}

func (r *gormSQLRecorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.stmt)
}

// take returns the statements recorded since the last call.
func (r *gormSQLRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stmt
	r.stmt = nil
	return s
}

// ormError renders an error for comparison: a server error by errno and
// SQLSTATE (message texts differ between MariaDB and Convoy), anything else
// by its text.
func ormError(err error) string {
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me):
		return fmt.Sprintf("error %d (%s)", me.Number, string(me.SQLState[:]))
	case errors.Is(err, gorm.ErrRecordNotFound):
		return "error: record not found"
	}
	return "error: " + err.Error()
}

// gormProgram runs one application's worth of GORM calls and returns each
// step's observable result. It is run once against MariaDB and once through
// Convoy on empty databases; steps use their own conversations so a failing
// step changes as little as possible for the later ones.
func gormProgram(t *testing.T, dsn string) []ormStep {
	t.Helper()
	rec := &gormSQLRecorder{}
	db, err := gorm.Open(gormmysql.Open(dsn), &gorm.Config{
		Logger:  rec,
		NowFunc: func() time.Time { return gormNow },
	})
	if err != nil {
		t.Fatalf("gorm.Open: %v", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	defer sqlDB.Close()
	// Multi-shard writes in one statement are refused inside a transaction
	// (docs/sql-reference.md), and GORM wraps every Create / Update / Delete in
	// one by default; the program sends those outside, as documented.
	noTx := db.Session(&gorm.Session{SkipDefaultTransaction: true})

	var steps []ormStep
	step := func(name string, fn func() (any, error)) {
		v, err := fn()
		res := ""
		if err != nil {
			res = ormError(err)
		} else {
			b, jerr := json.Marshal(v)
			if jerr != nil {
				t.Fatalf("%s: %v", name, jerr)
			}
			res = string(b)
		}
		detail := rec.take()
		if err != nil {
			detail = append(detail, "error: "+err.Error())
		}
		steps = append(steps, ormStep{name: name, result: res, detail: detail})
	}
	// ddlOf runs a migration and returns the DDL it sent: none for a table
	// that already matches its model.
	ddlOf := func(fn func() error) (any, error) {
		n := rec.len()
		err := fn()
		ddl := []string{}
		for _, s := range rec.since(n) {
			if w := strings.ToUpper(strings.Fields(s + " x")[0]); w == "CREATE" || w == "ALTER" || w == "DROP" {
				ddl = append(ddl, s)
			}
		}
		return map[string]any{"ddl": ddl}, err
	}
	rows := func(tx *gorm.DB) (any, error) { return map[string]int64{"rows": tx.RowsAffected}, tx.Error }
	msg := func(conv, seq uint64, msgID uint64) gormConvMsg {
		return gormConvMsg{ConvID: conv, Seq: seq, MsgID: msgID, SenderUID: 7, MsgType: 1, CreatedAt: gormNow.Add(time.Duration(msgID) * time.Millisecond)}
	}
	find := func(conds ...any) (any, error) {
		var ms []gormConvMsg
		err := db.Order("conv_id, seq").Find(&ms, conds...).Error
		return ms, err
	}

	// Migrations: a new unsharded table, then models on the existing
	// sharded tables (no-ops on MariaDB), then the introspection GORM uses.
	m := db.Migrator()
	step("AutoMigrate gorm_note (new unsharded table)", func() (any, error) { return ddlOf(func() error { return m.AutoMigrate(&gormNote{}) }) })
	step("AutoMigrate gorm_note again", func() (any, error) { return ddlOf(func() error { return m.AutoMigrate(&gormNote{}) }) })
	for _, model := range []schemaTabler{&gormConvMsg{}, &gormMsgContent{}, &gormConvSeq{}, &gormConvMember{}, &gormInbox{}} {
		step(fmt.Sprintf("AutoMigrate %s (existing sharded table)", model.TableName()), func() (any, error) {
			return ddlOf(func() error { return m.AutoMigrate(model) })
		})
	}
	step("Migrator CurrentDatabase", func() (any, error) { return m.CurrentDatabase(), nil })
	step("Migrator HasTable", func() (any, error) {
		has := map[string]bool{}
		for _, name := range []string{"conv_msg", "msg_content", "im_conv_seq", "im_conv_member", "im_inbox", "gorm_note", "no_such_table"} {
			has[name] = m.HasTable(name)
		}
		has["&gormConvMsg{}"] = m.HasTable(&gormConvMsg{})
		return has, nil
	})
	step("Migrator GetTables", func() (any, error) {
		tables, err := m.GetTables()
		sort.Strings(tables)
		return tables, err
	})
	for _, model := range []schemaTabler{&gormConvMsg{}, &gormNote{}} {
		step("Migrator ColumnTypes "+model.TableName(), func() (any, error) {
			cts, err := m.ColumnTypes(model)
			var out []string
			for _, c := range cts {
				n, _ := c.Nullable()
				pk, _ := c.PrimaryKey()
				uq, _ := c.Unique()
				ai, _ := c.AutoIncrement()
				l, _ := c.Length()
				p, s, _ := c.DecimalSize()
				ct, _ := c.ColumnType()
				dv, _ := c.DefaultValue()
				cm, _ := c.Comment()
				out = append(out, fmt.Sprintf("%s %s(%s) null=%v pk=%v uniq=%v ai=%v len=%d dec=%d,%d default=%q comment=%q scan=%v",
					c.Name(), c.DatabaseTypeName(), ct, n, pk, uq, ai, l, p, s, dv, cm, c.ScanType()))
			}
			return out, err
		})
	}
	step("Migrator HasColumn / HasIndex", func() (any, error) {
		return map[string]bool{
			"conv_msg.msg_type":               m.HasColumn(&gormConvMsg{}, "msg_type"),
			"conv_msg.nope":                   m.HasColumn(&gormConvMsg{}, "nope"),
			"conv_msg.uk_msg":                 m.HasIndex(&gormConvMsg{}, "uk_msg"),
			"msg_content.idx_conv":            m.HasIndex(&gormMsgContent{}, "idx_conv"),
			"im_inbox.idx_send_time":          m.HasIndex(&gormInbox{}, "idx_send_time"),
			"gorm_note.idx_gorm_note_conv_id": m.HasIndex(&gormNote{}, "idx_gorm_note_conv_id"),
		}, nil
	})
	step("Migrator GetIndexes conv_msg", func() (any, error) {
		idx, err := m.GetIndexes(&gormConvMsg{})
		var out []string
		for _, i := range idx {
			u, _ := i.Unique()
			p, _ := i.PrimaryKey()
			out = append(out, fmt.Sprintf("%s %v unique=%v primary=%v", i.Name(), i.Columns(), u, p))
		}
		sort.Strings(out)
		return out, err
	})

	// Create: single rows in the default transaction, batches.
	step("Create conv_msg (42,1)", func() (any, error) { r := msg(42, 1, 4201); return rows(db.Create(&r)) })
	step("Create conv_msg (42,1) again: duplicate key", func() (any, error) { r := msg(42, 1, 4201); return rows(db.Create(&r)) })
	step("Create msg_content (binary body)", func() (any, error) {
		c := gormMsgContent{MsgID: 4201, ConvID: 42, SenderUID: 7, MsgType: 1, Content: []byte{0xff, 0, '\'', '\\', 'x'}, CreatedAt: gormNow}
		return rows(db.Create(&c))
	})
	step("CreateInBatches one conversation (default transaction)", func() (any, error) {
		ms := []gormConvMsg{msg(42, 2, 4202), msg(42, 3, 4203), msg(42, 4, 4204), msg(42, 5, 4205), msg(42, 6, 4206)}
		return rows(db.CreateInBatches(&ms, 2))
	})
	step("CreateInBatches across shards (SkipDefaultTransaction)", func() (any, error) {
		var ms []gormConvMsg
		for c := uint64(1); c <= 6; c++ {
			ms = append(ms, msg(c, 1, 100*c+1), msg(c, 2, 100*c+2))
		}
		return rows(noTx.CreateInBatches(&ms, 5))
	})
	step("Create []gormInbox across shards (SkipDefaultTransaction)", func() (any, error) {
		in := []gormInbox{{UID: 3, ConvID: 42, Seq: 1, MsgID: 4201, SendTime: gormNow}, {UID: 4, ConvID: 42, Seq: 1, MsgID: 4201, SendTime: gormNow}, {UID: 5, ConvID: 42, Seq: 1, MsgID: 4201, SendTime: gormNow}}
		return rows(noTx.Create(&in))
	})
	step("Create gormConvSeq and gormConvMember (defaults)", func() (any, error) {
		if err := db.Create(&gormConvSeq{ConvID: 42, MaxSeq: 6}).Error; err != nil {
			return nil, err
		}
		return rows(db.Create(&gormConvMember{UID: 3, ConvID: 42}))
	})

	// Reads.
	step("First by condition", func() (any, error) {
		var m gormConvMsg
		err := db.First(&m, "conv_id = ? AND seq = ?", 42, 1).Error
		return m, err
	})
	step("First by primary key values", func() (any, error) {
		m := gormConvMsg{ConvID: 42, Seq: 3}
		err := db.First(&m).Error
		return m, err
	})
	step("First not found", func() (any, error) {
		var m gormConvMsg
		return m, db.First(&m, "conv_id = ? AND seq = ?", 42, 99).Error
	})
	step("Last in a conversation", func() (any, error) {
		var m gormConvMsg
		return m, db.Where("conv_id = ?", 42).Last(&m).Error
	})
	step("First without the shard key (every shard, LIMIT ?)", func() (any, error) {
		var m gormConvMsg
		return m, db.Order("msg_id").First(&m).Error // msg_id first: ties on conv_id would make it a coin toss
	})
	step("Where Order Limit Find (history page)", func() (any, error) {
		var ms []gormConvMsg
		return ms, db.Where("conv_id = ? AND seq < ?", 42, 6).Order("seq DESC").Limit(3).Find(&ms).Error
	})
	step("Find conv_id IN (every shard named)", func() (any, error) { return find("conv_id IN ?", []uint64{1, 2, 3, 42}) })
	step("Find struct conditions", func() (any, error) {
		var ms []gormConvMsg
		return ms, db.Where(&gormConvMsg{ConvID: 42, MsgType: 1}).Order("seq").Find(&ms).Error
	})
	step("Count in a conversation, and everywhere", func() (any, error) {
		var one, all int64
		if err := db.Model(&gormConvMsg{}).Where("conv_id = ?", 42).Count(&one).Error; err != nil {
			return nil, err
		}
		err := db.Model(&gormConvMsg{}).Count(&all).Error
		return []int64{one, all}, err
	})
	step("Pluck msg_id", func() (any, error) {
		var ids []uint64
		return ids, db.Model(&gormConvMsg{}).Where("conv_id = ?", 42).Order("seq").Pluck("msg_id", &ids).Error
	})
	step("Find msg_content by key", func() (any, error) {
		var c []gormMsgContent
		return c, db.Where("conv_id = ? AND msg_id = ?", 42, 4201).Find(&c).Error
	})
	step("Find gormInbox by uid IN", func() (any, error) {
		var in []gormInbox
		return in, db.Where("uid IN ?", []uint64{3, 4, 5}).Order("uid").Find(&in).Error
	})
	step("Find gormConvSeq and gormConvMember", func() (any, error) {
		var s []gormConvSeq
		var mb []gormConvMember
		if err := db.Find(&s, "conv_id = ?", 42).Error; err != nil {
			return nil, err
		}
		return []any{s, mb}, db.Find(&mb, "uid = ?", 3).Error
	})

	// Updates by primary key (GORM names both key columns).
	step("Update one column of a loaded row", func() (any, error) {
		m := gormConvMsg{ConvID: 42, Seq: 1}
		return rows(db.Model(&m).Update("msg_type", 2))
	})
	step("Updates with a map", func() (any, error) {
		return rows(db.Model(&gormConvMsg{ConvID: 42, Seq: 2}).Updates(map[string]any{"msg_type": 3, "sender_uid": 9}))
	})
	step("Updates with a struct", func() (any, error) {
		return rows(db.Model(&gormConvMsg{ConvID: 42, Seq: 3}).Updates(gormConvMsg{SenderUID: 11}))
	})
	step("Save an existing row", func() (any, error) {
		r := msg(42, 4, 4204)
		r.MsgType = 5
		return rows(db.Save(&r))
	})
	step("Update with a Where on the key", func() (any, error) {
		return rows(db.Model(&gormConvMsg{}).Where("conv_id = ? AND seq >= ?", 42, 5).Update("msg_type", 4))
	})
	step("read back conversation 42", func() (any, error) { return find("conv_id = ?", 42) })

	// Deletes by composite primary key: (conv_id, seq) IN ((?,?), ...).
	step("Delete by composite primary key", func() (any, error) { return rows(db.Delete(&gormConvMsg{ConvID: 42, Seq: 1})) })
	step("Delete a slice, one conversation", func() (any, error) {
		return rows(db.Delete(&[]gormConvMsg{{ConvID: 42, Seq: 2}, {ConvID: 42, Seq: 3}}))
	})
	step("Delete a slice across shards (SkipDefaultTransaction)", func() (any, error) {
		return rows(noTx.Delete(&[]gormConvMsg{{ConvID: 1, Seq: 1}, {ConvID: 2, Seq: 2}}))
	})
	step("Delete with a Where on the key", func() (any, error) {
		return rows(db.Where("conv_id = ? AND seq > ?", 42, 5).Delete(&gormConvMsg{}))
	})
	step("Delete gormInbox by composite primary key", func() (any, error) {
		return rows(db.Delete(&gormInbox{UID: 4, ConvID: 42, Seq: 1}))
	})
	step("read back conversations 1, 2, 42", func() (any, error) { return find("conv_id IN ?", []uint64{1, 2, 42}) })

	// Transactions: nested db.Transaction is SAVEPOINT / ROLLBACK TO.
	errInner := errors.New("inner fails")
	step("nested Transaction, inner rolled back", func() (any, error) {
		return nil, db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Create(&[]gormConvMsg{msg(77, 1, 7701)}).Error; err != nil {
				return err
			}
			if err := tx.Transaction(func(tx2 *gorm.DB) error {
				if err := tx2.Create(&[]gormConvMsg{msg(77, 2, 7702)}).Error; err != nil {
					return err
				}
				return errInner
			}); !errors.Is(err, errInner) {
				return fmt.Errorf("inner transaction: %w", err)
			}
			return tx.Create(&[]gormConvMsg{msg(77, 3, 7703)}).Error
		})
	})
	step("read back conversation 77", func() (any, error) { return find("conv_id = ?", 77) })
	step("nested Transaction, both commit", func() (any, error) {
		return nil, db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Create(&[]gormConvMsg{msg(78, 1, 7801)}).Error; err != nil {
				return err
			}
			return tx.Transaction(func(tx2 *gorm.DB) error {
				return tx2.Model(&gormConvMsg{ConvID: 78, Seq: 1}).Update("msg_type", 9).Error
			})
		})
	})
	step("read back conversation 78", func() (any, error) { return find("conv_id = ?", 78) })
	step("Transaction rolled back by its function", func() (any, error) {
		return nil, db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Create(&[]gormConvMsg{msg(79, 1, 7901)}).Error; err != nil {
				return err
			}
			return errors.New("outer fails")
		})
	})
	step("read back conversation 79", func() (any, error) { return find("conv_id = ?", 79) })
	step("Begin SavePoint RollbackTo Commit", func() (any, error) {
		tx := db.Begin()
		for _, q := range []*gorm.DB{
			tx.Create(&[]gormConvMsg{msg(80, 1, 8001)}),
			tx.SavePoint("sp1"),
			tx.Create(&[]gormConvMsg{msg(80, 2, 8002)}),
			tx.RollbackTo("sp1"),
			tx.Create(&[]gormConvMsg{msg(80, 3, 8003)}),
		} {
			if q.Error != nil {
				tx.Rollback()
				return nil, q.Error
			}
		}
		return nil, tx.Commit().Error
	})
	step("read back conversation 80", func() (any, error) { return find("conv_id = ?", 80) })

	// The unsharded model with an auto-increment key (INSERT ... RETURNING).
	body := "a body"
	step("Create gormNote (auto-increment id)", func() (any, error) {
		n := gormNote{ConvID: 42, Title: "first", Body: &body}
		err := db.Create(&n).Error
		return n, err
	})
	step("Create []gormNote (ids of a batch)", func() (any, error) {
		ns := []gormNote{{ConvID: 42, Title: "second"}, {ConvID: 1, Title: "third"}}
		err := db.Create(&ns).Error
		return ns, err
	})
	step("Update gormNote", func() (any, error) { return rows(db.Model(&gormNote{ID: 2}).Update("title", "2nd")) })
	step("Delete gormNote", func() (any, error) { return rows(db.Delete(&gormNote{ID: 3})) })
	step("Find gormNote", func() (any, error) {
		var ns []gormNote
		return ns, db.Order("id").Find(&ns).Error
	})
	return steps
}

// TestGORM runs the same GORM program (gorm.io/gorm over go-sql-driver, the
// versions in go.mod) against the reference MariaDB and through Convoy and
// requires the same observable result from every step: migrations (and the
// DDL they send), introspection, CRUD on sharded and unsharded models,
// composite-key deletes, nested transactions, auto-increment ids. A
// differing step is reported with both results and the SQL GORM sent
// through Convoy.
func TestGORM(t *testing.T) {
	s := newStack(t)
	const params = "?collation=utf8mb4_general_ci&parseTime=true&loc=UTC&timeout=5s&readTimeout=30s"
	want := gormProgram(t, fmt.Sprintf("root@tcp(%s)/im%s", s.ref.Addr(), params))
	got := gormProgram(t, fmt.Sprintf("convoy:convoy@tcp(%s)/im%s", s.convoy.addr, params))
	compareORMSteps(t, "GORM", want, got)

	// A multi-shard batch inside GORM's default
	// transaction stays refused, with a message that says how to send it.
	t.Run("multi-shard CreateInBatches in a transaction is refused with advice", func(t *testing.T) {
		db, err := gorm.Open(gormmysql.Open(fmt.Sprintf("convoy:convoy@tcp(%s)/im%s", s.convoy.addr, params)), &gorm.Config{Logger: &gormSQLRecorder{}})
		if err != nil {
			t.Fatal(err)
		}
		ms := []gormConvMsg{{ConvID: 901, Seq: 1, MsgID: 90101, CreatedAt: gormNow}, {ConvID: 902, Seq: 1, MsgID: 90201, CreatedAt: gormNow}}
		err = db.CreateInBatches(&ms, 10).Error
		if errno(err) != 1235 || !strings.Contains(err.Error(), "SkipDefaultTransaction") {
			t.Errorf("want 1235 naming SkipDefaultTransaction, got %v", err)
		}
		var n int64
		if err := db.Model(&gormConvMsg{}).Where("conv_id IN ?", []uint64{901, 902}).Count(&n).Error; err != nil || n != 0 {
			t.Errorf("refused batch stored %d rows (%v)", n, err)
		}
	})
}
