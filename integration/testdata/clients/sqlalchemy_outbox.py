"""SQLAlchemy 1.4 units of work over several conversations in outbox mode
(SET convoy_txn = 'outbox' on every connection), run by TestOutboxORMs
(outbox_test.go) through Convoy.

Usage: python3 sqlalchemy_outbox.py HOST PORT USER PASSWORD BASE

Session.add_all of three conversations' messages (ids BASE+1..3, conv_ids
BASE+1..3) commits; the same for BASE+11..13 is rolled back. Prints one JSON
object per step: {"step": name, "result": "ok" or "error <errno> <message>"}.
"""

import datetime
import json
import sys

import pymysql
from sqlalchemy import Column, create_engine
from sqlalchemy.dialects.mysql import BIGINT, DATETIME, TINYINT
from sqlalchemy.orm import Session, declarative_base

host, port, user, password, base = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
T0 = datetime.datetime(2026, 5, 1, 8, 0, 0, 250000)

engine = create_engine(
    "mysql+pymysql://%s:%s@%s:%d/im?charset=utf8mb4" % (user, password, host, port),
    connect_args={"init_command": "SET convoy_txn = 'outbox'"},
    future=True,
)
Base = declarative_base()


class ConvMsg(Base):
    __tablename__ = "conv_msg"
    conv_id = Column(BIGINT(unsigned=True), primary_key=True, autoincrement=False)
    seq = Column(BIGINT(unsigned=True), primary_key=True, autoincrement=False)
    msg_id = Column(BIGINT(unsigned=True), nullable=False, unique=True)
    sender_uid = Column(BIGINT(unsigned=True), nullable=False)
    msg_type = Column(TINYINT(unsigned=True), nullable=False)
    created_at = Column(DATETIME(fsp=3), nullable=False)


def msgs(first):
    return [ConvMsg(conv_id=first + i, seq=1, msg_id=first + i, sender_uid=7, msg_type=1, created_at=T0) for i in range(3)]


def step(name, fn):
    try:
        fn()
        result = "ok"
    except Exception as e:
        err = getattr(e, "orig", e)
        if isinstance(err, pymysql.err.MySQLError) and err.args and isinstance(err.args[0], int):
            result = "error %d %s" % (err.args[0], err.args[1] if len(err.args) > 1 else "")
        else:
            result = "error: %s %s" % (type(err).__name__, err)
    print(json.dumps({"step": name, "result": result}, ensure_ascii=False), flush=True)


def commit():
    with Session(engine) as s:
        s.add_all(msgs(base + 1))
        s.commit()


def rollback():
    with Session(engine) as s:
        s.add_all(msgs(base + 11))
        s.flush()  # the INSERTs are sent, then rolled back
        s.rollback()


step("add_all over three conversations, commit", commit)
step("add_all over three conversations, flush, rollback", rollback)
