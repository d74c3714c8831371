"""One application's worth of SQLAlchemy 1.4 (ORM and Core) and plain
PyMySQL calls on the IM schema, run by TestSQLAlchemy (orm_sqlalchemy_test.go)
against plain MariaDB and through Convoy.

Usage: python3 sqlalchemy_orm.py HOST PORT USER PASSWORD

Prints one JSON object per step: {"step": name, "result": text, "sql": [...]}.
"result" is what is compared (a value as JSON, or "error <errno>": message
texts differ between servers); "sql" lists the statements the step sent, for
the failure report only. Every step runs even if an earlier one failed; read
backs use a separate autocommit connection, so they show what was committed.
"""

import datetime
import json
import sys

import pymysql
from sqlalchemy import Column, MetaData, String, Table, Text, create_engine, event, func, inspect, insert, select
from sqlalchemy.dialects.mysql import BIGINT, DATETIME, INTEGER, TINYINT, VARBINARY
from sqlalchemy.orm import Session, declarative_base

host, port, user, password = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
T0 = datetime.datetime(2026, 5, 1, 8, 0, 0, 250000)

engine = create_engine(
    "mysql+pymysql://%s:%s@%s:%d/im?charset=utf8mb4" % (user, password, host, port),
    future=True,
)
sent = []


@event.listens_for(engine, "before_cursor_execute")
def _record(conn, cursor, statement, parameters, context, executemany):
    sent.append(" ".join(statement.split()) + ("  %r" % (parameters,) if parameters else ""))


def dbapi_connect(**kw):
    """A plain PyMySQL connection (PyMySQL's default: autocommit off)."""
    return pymysql.connect(host=host, port=port, user=user, password=password, database="im", charset="utf8mb4", **kw)


# Read backs see committed rows only, on their own autocommit connection.
checker = dbapi_connect(autocommit=True)


def committed(sql, *args):
    with checker.cursor() as cur:
        cur.execute(sql, args)
        return [list(r) for r in cur.fetchall()]


def step(name, fn):
    del sent[:]
    try:
        result = json.dumps(fn(), default=str, ensure_ascii=False, sort_keys=True)
    except Exception as e:  # the result of the step, compared like a value
        err = getattr(e, "orig", e)
        if isinstance(err, pymysql.err.MySQLError) and err.args and isinstance(err.args[0], int):
            result = "error %d" % err.args[0]
        else:
            result = "error: %s" % type(err).__name__
        sent.append("error: %s" % (e,))
    print(json.dumps({"step": name, "result": result, "sql": list(sent)}, ensure_ascii=False), flush=True)


Base = declarative_base()


class ConvMsg(Base):
    """conv_msg: sharded by conv_id, primary key (conv_id, seq)."""

    __tablename__ = "conv_msg"
    conv_id = Column(BIGINT(unsigned=True), primary_key=True, autoincrement=False, comment="分片键")
    seq = Column(BIGINT(unsigned=True), primary_key=True, autoincrement=False)
    msg_id = Column(BIGINT(unsigned=True), nullable=False, unique=True)
    sender_uid = Column(BIGINT(unsigned=True), nullable=False)
    msg_type = Column(TINYINT(unsigned=True), nullable=False)
    created_at = Column(DATETIME(fsp=3), nullable=False)

    def row(self):
        return [self.conv_id, self.seq, self.msg_id, self.sender_uid, self.msg_type, self.created_at]


class MsgContent(Base):
    """msg_content: sharded by conv_id, primary key msg_id."""

    __tablename__ = "msg_content"
    msg_id = Column(BIGINT(unsigned=True), primary_key=True, autoincrement=False)
    conv_id = Column(BIGINT(unsigned=True), nullable=False)
    sender_uid = Column(BIGINT(unsigned=True), nullable=False)
    msg_type = Column(TINYINT(unsigned=True), nullable=False)
    content = Column(VARBINARY(4096), nullable=False)
    created_at = Column(DATETIME(fsp=3), nullable=False)


class Inbox(Base):
    """im_inbox: sharded by uid."""

    __tablename__ = "im_inbox"
    uid = Column(BIGINT(unsigned=True), primary_key=True, autoincrement=False)
    conv_id = Column(BIGINT(unsigned=True), primary_key=True, autoincrement=False)
    seq = Column(BIGINT(unsigned=True), primary_key=True, autoincrement=False)
    msg_id = Column(BIGINT(unsigned=True), nullable=False)
    send_time = Column(DATETIME(fsp=3), nullable=False)


class Note(Base):
    """sa_note: a new unsharded table with an auto-increment key."""

    __tablename__ = "sa_note"
    id = Column(BIGINT(unsigned=True), primary_key=True, autoincrement=True)
    conv_id = Column(BIGINT(unsigned=True), nullable=False, index=True)
    title = Column(String(64), nullable=False)
    body = Column(Text)
    score = Column(INTEGER, server_default="0")


def msg(conv, seq, msg_id, msg_type=1):
    return ConvMsg(conv_id=conv, seq=seq, msg_id=msg_id, sender_uid=7, msg_type=msg_type,
                   created_at=T0 + datetime.timedelta(milliseconds=msg_id))


def seqs(conv):
    return committed("SELECT seq, msg_type FROM conv_msg WHERE conv_id = %s ORDER BY seq", conv)


def ddl_of(fn):
    fn()
    return {"ddl": [s for s in sent if s.split(" ", 1)[0].upper() in ("CREATE", "ALTER", "DROP")]}


# --- Connect and reflect (what Alembic and autoload do). ---
step("connect (dialect initialisation)", lambda: engine.connect().close())
LOGICAL = ["conv_msg", "msg_content", "im_conv_seq", "im_conv_member", "im_inbox"]


def columns(table):
    return [[c["name"], str(c["type"]), c["nullable"], c.get("default"), c.get("autoincrement"), c.get("comment")]
            for c in inspect(engine).get_columns(table)]


step("inspect get_table_names", lambda: sorted(inspect(engine).get_table_names()))
step("inspect has_table", lambda: {t: inspect(engine).has_table(t) for t in LOGICAL + ["sa_note", "no_such_table"]})
step("inspect get_columns conv_msg", lambda: columns("conv_msg"))
step("inspect get_columns msg_content", lambda: columns("msg_content"))
step("inspect get_pk_constraint conv_msg", lambda: inspect(engine).get_pk_constraint("conv_msg"))
step("inspect get_pk_constraint im_inbox", lambda: inspect(engine).get_pk_constraint("im_inbox"))
step("inspect get_indexes msg_content", lambda: inspect(engine).get_indexes("msg_content"))
step("inspect get_indexes im_conv_member", lambda: inspect(engine).get_indexes("im_conv_member"))
step("inspect get_unique_constraints conv_msg", lambda: inspect(engine).get_unique_constraints("conv_msg"))
step("inspect get_table_comment / options conv_msg",
     lambda: [inspect(engine).get_table_comment("conv_msg"), sorted(inspect(engine).get_table_options("conv_msg").items())])
step("Table autoload_with conv_msg",
     lambda: [[c.name, str(c.type), c.primary_key] for c in Table("conv_msg", MetaData(), autoload_with=engine).columns])

# --- create_all: the sharded tables exist (no DDL), sa_note is new. ---
step("metadata.create_all", lambda: ddl_of(lambda: Base.metadata.create_all(engine)))
step("metadata.create_all again", lambda: ddl_of(lambda: Base.metadata.create_all(engine)))
step("inspect get_table_names after create_all", lambda: sorted(inspect(engine).get_table_names()))
step("inspect get_columns sa_note", lambda: columns("sa_note"))


# --- ORM session: add / commit, query, update, delete. ---
def add_commit():
    with Session(engine) as s:
        s.add_all([msg(42, 1, 4201), msg(42, 2, 4202), msg(42, 3, 4203)])
        s.add(MsgContent(msg_id=4201, conv_id=42, sender_uid=7, msg_type=1, content=b"\xff\x00'\\x", created_at=T0))
        s.commit()
    return seqs(42)


step("session add_all commit (one conversation)", add_commit)


def add_notes():
    with Session(engine) as s:
        notes = [Note(conv_id=42, title="first", body="a body"), Note(conv_id=1, title="second")]
        s.add_all(notes)
        s.commit()
        return [[n.id, n.title, n.score] for n in notes]


step("session add Note commit (auto-increment ids)", add_notes)


def add_inbox():
    with Session(engine) as s:  # one user: one shard
        s.add(Inbox(uid=3, conv_id=42, seq=1, msg_id=4201, send_time=T0))
        s.commit()
    return committed("SELECT uid, conv_id, seq, msg_id FROM im_inbox WHERE uid = 3")


step("session add Inbox commit", add_inbox)


def query():
    with Session(engine) as s:
        got = [m.row() for m in s.query(ConvMsg).filter_by(conv_id=42).order_by(ConvMsg.seq.desc()).limit(2)]
        one = s.get(ConvMsg, (42, 2)).row()
        body = s.execute(select(MsgContent.content).where(MsgContent.conv_id == 42, MsgContent.msg_id == 4201)).scalar_one()
        return [got, one, body.hex()]


step("session query / get by composite key", query)


def query_everywhere():
    with Session(engine) as s:
        n = s.query(func.count()).select_from(ConvMsg).scalar()
        top = [m.row() for m in s.query(ConvMsg).order_by(ConvMsg.msg_id.desc()).limit(2)]
        return [n, top]


step("session query without the shard key (every shard)", query_everywhere)


def query_notes():
    with Session(engine) as s:
        return [[n.id, n.conv_id, n.title, n.body] for n in s.query(Note).order_by(Note.id)]


step("session query the unsharded table", query_notes)


def update_delete():
    with Session(engine) as s:
        s.get(ConvMsg, (42, 2)).msg_type = 5
        s.commit()
        s.delete(s.get(ConvMsg, (42, 3)))
        s.commit()
    return seqs(42)


step("session update commit, delete commit", update_delete)


# --- Rollback must undo everything, exactly as on MariaDB (issue 12 item 0).
# Each step has a conversation of its own, seeded with a committed seq 1; it
# inserts seq 2 and deletes seq 1 in one transaction (one conversation, so
# one shard), rolls back, and reads back: [[1, 1]] is the right answer. ---
def seeded(conv):
    with checker.cursor() as cur:
        cur.execute("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) "
                    "VALUES (%s, 1, %s, 7, 1, %s)", (conv, conv * 100 + 1, T0))
    del sent[:]
    return conv


def session_rollback():
    conv = seeded(50)
    with Session(engine) as s:
        s.add(msg(conv, 2, conv * 100 + 2))
        s.flush()
        s.delete(s.get(ConvMsg, (conv, 1)))
        s.flush()
        s.rollback()
    return seqs(conv)


step("session insert + delete, rollback", session_rollback)


def session_rollback_unsharded():
    with Session(engine) as s:
        s.add(Note(conv_id=5, title="rolled back"))
        s.query(Note).filter(Note.title == "first").delete()
        s.flush()
        s.rollback()
    return committed("SELECT id, title FROM sa_note ORDER BY id")


step("session insert + delete on the unsharded table, rollback", session_rollback_unsharded)


def core_rollback():
    conv = seeded(51)
    with engine.connect() as c:  # 2.0 style: autobegin, explicit rollback
        c.execute(insert(ConvMsg.__table__).values(conv_id=conv, seq=2, msg_id=conv * 100 + 2, sender_uid=7, msg_type=1, created_at=T0))
        c.execute(ConvMsg.__table__.delete().where(ConvMsg.conv_id == conv, ConvMsg.seq == 1))
        c.rollback()
    return seqs(conv)


step("Core connection insert + delete, rollback", core_rollback)


def begin_block_raises():
    class Abort(Exception):
        pass

    conv = seeded(52)
    try:
        with engine.begin() as c:
            c.execute(insert(ConvMsg.__table__).values(conv_id=conv, seq=2, msg_id=conv * 100 + 2, sender_uid=7, msg_type=1, created_at=T0))
            c.execute(ConvMsg.__table__.delete().where(ConvMsg.conv_id == conv, ConvMsg.seq == 1))
            raise Abort()
    except Abort:
        pass
    return seqs(conv)


step("engine.begin() block that raises", begin_block_raises)


def core_commit():
    with engine.begin() as c:
        c.execute(insert(ConvMsg.__table__).values(conv_id=45, seq=1, msg_id=4501, sender_uid=7, msg_type=1, created_at=T0))
    return seqs(45)


step("engine.begin() block that commits", core_commit)


# --- Plain PyMySQL: its own transaction handling, seeded as above. ---
def pymysql_autocommit(name, **connect_args):
    def run():
        c = dbapi_connect(**connect_args)
        try:
            with c.cursor() as cur:
                cur.execute("SELECT @@autocommit")
                return {"driver": c.get_autocommit(), "server": cur.fetchone()[0]}
        finally:
            c.close()

    step(name, run)


def pymysql_rollback(name, conv, explicit_begin, **connect_args):
    def run():
        seeded(conv)
        c = dbapi_connect(**connect_args)
        try:
            with c.cursor() as cur:
                if explicit_begin:
                    c.begin()
                    sent.append("BEGIN")
                cur.execute("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) "
                            "VALUES (%s, 2, %s, 7, 1, %s)", (conv, conv * 100 + 2, T0))
                cur.execute("DELETE FROM conv_msg WHERE conv_id = %s AND seq = 1", (conv,))
                sent.extend(["INSERT INTO conv_msg ... (%d, 2, ...)" % conv, "DELETE FROM conv_msg WHERE conv_id = %d AND seq = 1" % conv])
                c.rollback()
                sent.append("ROLLBACK")
            return seqs(conv)
        finally:
            c.close()

    step(name, run)


# PyMySQL's default is autocommit off: it sends SET autocommit=0 only if the
# server's status flags (greeting, then OK packets) say autocommit is on.
pymysql_autocommit("pymysql default connection: autocommit as driver and server see it")
pymysql_autocommit("pymysql autocommit=True: autocommit as driver and server see it", autocommit=True)
pymysql_rollback("pymysql default connection: insert + delete, rollback", 60, False)
pymysql_rollback("pymysql default connection: begin, insert + delete, rollback", 61, True)
pymysql_rollback("pymysql autocommit=True: begin, insert + delete, rollback", 62, True, autocommit=True)

checker.close()
