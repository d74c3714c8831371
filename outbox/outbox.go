// Package outbox holds what the cross-shard outbox (docs/design.md §12)
// keeps on the datasources, and the delivery workers' elections.
//
// A session in outbox mode (SET @@convoy_txn = 'outbox') writes its home
// shard as usual; the rows it inserts for other shards are recorded, as
// logical statements with their values printed in, in the home
// datasource's outbox table (Database.HomeTable) inside the same local
// transaction: COMMIT commits both or neither. One delivery worker per
// datasource (elected here, through etcd) applies each entry to its shard
// through the engine's routing, in its own transaction on the target,
// together with a row in the target shard database's applied table
// (AppliedTable): an entry applied once is never applied again, even after
// its shard moved (the applied table is a companion table, moved with the
// shard's rows by a migration).
package outbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/router"
)

// Database is Convoy's own database on every datasource that is a home:
// the outbox entries and the per-home sequence that orders them.
const Database = "_convoy"

// The home side's tables, in Database.
const (
	HomeTable = "_convoy_outbox"
	SeqTable  = "_convoy_outbox_seq"
)

// AppliedTable is the applied marker table in each shard database: the
// companion table router.OutboxAppliedTable.
const AppliedTable = router.OutboxAppliedTable

// Entry states.
const (
	StatePending = "pending"
	StateDead    = "dead"
)

// HomeDDL creates the home side's database and tables.
func HomeDDL() []string {
	db := sqlq.Ident(Database)
	return []string{
		"CREATE DATABASE IF NOT EXISTS " + db + " DEFAULT CHARACTER SET utf8mb4",
		"CREATE TABLE IF NOT EXISTS " + db + "." + sqlq.Ident(SeqTable) + ` (
  home INT             NOT NULL COMMENT 'home shard (-1: the unsharded tables)',
  n    BIGINT UNSIGNED NOT NULL COMMENT 'last entry seq given out',
  PRIMARY KEY (home)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='Convoy outbox: entry seqs per home shard, given out under this row''s lock at COMMIT (seq order is commit order)'`,
		"CREATE TABLE IF NOT EXISTS " + db + "." + sqlq.Ident(HomeTable) + ` (
  home       INT               NOT NULL,
  seq        BIGINT UNSIGNED   NOT NULL,
  target     SMALLINT UNSIGNED NOT NULL COMMENT 'logical shard the entry writes',
  conv_id    BIGINT UNSIGNED   NOT NULL COMMENT 'a shard key of its rows: the applied marker is filed under it',
  n_rows     INT UNSIGNED      NOT NULL,
  db         VARCHAR(64)       NOT NULL COMMENT 'the writing session''s database',
  vars       TEXT              NOT NULL COMMENT 'the writing session''s variables (JSON)',
  stmt       LONGTEXT          NOT NULL COMMENT 'logical statement, values printed in',
  state      ENUM('pending','dead') NOT NULL DEFAULT 'pending',
  tries      INT UNSIGNED      NOT NULL DEFAULT 0 COMMENT 'failed tries',
  attempts   INT UNSIGNED      NOT NULL DEFAULT 0 COMMENT 'passes that set out to apply it: 0, no marker can exist yet',
  last_error VARCHAR(1024)     NOT NULL DEFAULT '',
  created_at DATETIME(6)       NOT NULL,
  next_at    DATETIME(6)       NOT NULL COMMENT 'not tried again before',
  PRIMARY KEY (home, seq),
  KEY by_state (state, home, seq, next_at),
  KEY by_pair (state, home, target, seq, next_at),
  KEY by_age (state, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Convoy outbox: writes of outbox transactions for other shards, delivered by the datasource''s elected worker'`,
		// (Tables made before attempts and the read's indexes existed.)
		"ALTER TABLE " + db + "." + sqlq.Ident(HomeTable) + " ADD COLUMN IF NOT EXISTS attempts INT UNSIGNED NOT NULL DEFAULT 0, " +
			"ADD INDEX IF NOT EXISTS by_pair (state, home, target, seq, next_at), ADD INDEX IF NOT EXISTS by_age (state, created_at)",
	}
}

// AppliedDDL creates the applied marker table in a shard database.
func AppliedDDL(database string) string {
	return "CREATE TABLE IF NOT EXISTS " + sqlq.Ident(database) + "." + sqlq.Ident(AppliedTable) + ` (
  ` + router.CompanionKey + ` BIGINT UNSIGNED NOT NULL COMMENT 'a shard key of the entry''s rows (moves with its shard)',
  origin     VARCHAR(64)     NOT NULL COMMENT 'the home datasource',
  home       INT             NOT NULL,
  seq        BIGINT UNSIGNED NOT NULL,
  applied_at DATETIME(3)     NOT NULL,
  PRIMARY KEY (` + router.CompanionKey + `, origin, home, seq),
  KEY by_time (applied_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='Convoy outbox: entries applied to this database''s shards (written with the applied rows)'`
}

// EnsureApplied creates the applied table in database if it is missing: a
// migration does so in the source database before it lists the companion
// tables, so markers written during the move go with it.
func EnsureApplied(ctx context.Context, db *sql.DB, database string) error {
	if _, err := db.ExecContext(ctx, AppliedDDL(database)); err != nil {
		return fmt.Errorf("outbox: create %s.%s: %w", database, AppliedTable, err)
	}
	return nil
}
