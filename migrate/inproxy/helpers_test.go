package inproxy

import (
	"encoding/json"

	"github.com/convoy-im/convoy/migrate/internal/jobrec"
	"github.com/convoy-im/convoy/router"
)

// encodeProgress is a job record's Progress as the runner writes it, of
// the fields the proxies read (the runner's record has more: migrate's
// TestProgressView checks that the proxies read its fields alike).
func encodeProgress(p jobrec.Progress) json.RawMessage {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	return b
}

// keysOfShard returns n keys from `from` upwards whose shard is sh.
func keysOfShard(sh router.Shard, n int, from uint64) []uint64 { return router.KeysOf(sh, n, from) }
