package stats

import "time"

// Triggers are the shard expansion triggers of docs/design.md §7 as
// configured (health.shard_qps, health.write_p99): one rule for
// SHOW SHARD HEALTH (proxy/admin) and the convoy_shards_over_threshold
// gauge (proxy/engine).
type Triggers struct {
	QPS      float64
	WriteP99 time.Duration
}

// OverQPS reports a shard busier than the QPS trigger.
func (t Triggers) OverQPS(st ShardStats) bool { return st.QPS > t.QPS }

// OverWriteP99 reports a shard whose writes' P99 is over the trigger; a
// shard without writes has none.
func (t Triggers) OverWriteP99(st ShardStats) bool {
	return st.Writes > 0 && st.WriteP99 > t.WriteP99
}
