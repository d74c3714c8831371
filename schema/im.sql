-- Logical schema of the five sharded IM tables.
--
-- Sent THROUGH Convoy (scripts/run.sh: mariadb -h127.0.0.1 -P3307 ... im < schema/im.sql):
-- the proxy fans each CREATE TABLE out to every physical table (conv_msg_0000 ..
-- conv_msg_1023 in im_0..im_7), so this file names only logical tables and no
-- database. Any other table is unsharded and lives in database `im` on ds0.
--
-- Sources: conv_msg, msg_content = seed 000 (DDL verbatim, plus explicit
-- collation); im_conv_seq, im_conv_member, im_inbox = seed 001 (the seed gives
-- only keys and fields; types follow seed 000: ids/seqs BIGINT UNSIGNED,
-- times DATETIME(3)). Shard keys (DESIGN.md section 1): conv_msg, msg_content,
-- im_conv_seq by conv_id; im_conv_member, im_inbox by uid.

-- Message body: one copy per message, fetched in batches by msg_id.
CREATE TABLE IF NOT EXISTS msg_content (
  msg_id     BIGINT UNSIGNED  NOT NULL COMMENT '全局消息 ID（08 章）',
  conv_id    BIGINT UNSIGNED  NOT NULL,
  sender_uid BIGINT UNSIGNED  NOT NULL,
  msg_type   TINYINT UNSIGNED NOT NULL COMMENT '1=text 2=image 3=file ...',
  content    VARBINARY(4096)  NOT NULL COMMENT '加密载荷，含 @ 与引用元信息',
  created_at DATETIME(3)      NOT NULL,
  PRIMARY KEY (msg_id),
  KEY idx_conv (conv_id, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

-- Conversation index: seq is contiguous per conversation, the only pagination anchor.
CREATE TABLE IF NOT EXISTS conv_msg (
  conv_id    BIGINT UNSIGNED  NOT NULL COMMENT '分片键',
  seq        BIGINT UNSIGNED  NOT NULL COMMENT '会话内单调递增序号（08 章）',
  msg_id     BIGINT UNSIGNED  NOT NULL,
  sender_uid BIGINT UNSIGNED  NOT NULL,
  msg_type   TINYINT UNSIGNED NOT NULL,
  created_at DATETIME(3)      NOT NULL,
  PRIMARY KEY (conv_id, seq),
  UNIQUE KEY uk_msg (msg_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

-- Current max seq of a conversation (seq allocation), plus member count.
CREATE TABLE IF NOT EXISTS im_conv_seq (
  conv_id    BIGINT UNSIGNED NOT NULL COMMENT '分片键',
  max_seq    BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '会话当前最大 seq，发号用',
  member_cnt INT UNSIGNED    NOT NULL DEFAULT 0,
  PRIMARY KEY (conv_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

-- A user's conversation list, ordered by updated_at.
CREATE TABLE IF NOT EXISTS im_conv_member (
  uid           BIGINT UNSIGNED  NOT NULL COMMENT '分片键',
  conv_id       BIGINT UNSIGNED  NOT NULL,
  last_read_seq BIGINT UNSIGNED  NOT NULL DEFAULT 0,
  mute          TINYINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '0=normal 1=muted',
  updated_at    DATETIME(3)      NOT NULL,
  PRIMARY KEY (uid, conv_id),
  KEY idx_uid_updated (uid, updated_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

-- Per-user inbox / unread index (write fan-out); the largest table, TTL-archived.
CREATE TABLE IF NOT EXISTS im_inbox (
  uid       BIGINT UNSIGNED NOT NULL COMMENT '分片键',
  conv_id   BIGINT UNSIGNED NOT NULL,
  seq       BIGINT UNSIGNED NOT NULL,
  msg_id    BIGINT UNSIGNED NOT NULL,
  send_time DATETIME(3)     NOT NULL,
  PRIMARY KEY (uid, conv_id, seq),
  KEY idx_send_time (send_time)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;
