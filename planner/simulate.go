package planner

import (
	"fmt"

	"github.com/convoy-im/convoy/router"
)

// Workload is a synthetic fleet for `convoy plan --simulate`. Zero fields
// take seed 001's figures (SeedWorkload; docs/design.md §11).
type Workload struct {
	MessagesPerDay float64 // 400 M (docs/design.md §11; seed 001: 消息日增 4 亿条)
	HistoryDays    float64 // days of messages already stored in MySQL
	// Bytes per message: the conv_msg row with its indexes, and the body in
	// msg_content with its index; the other three tables add little.
	IndexBytes, BodyBytes float64
	// StatementsPerMessage counts the statements one message causes over
	// its life (the insert, seq allocation, inbox and read-position updates,
	// history reads); PeakFactor is the peak hour over the daily mean.
	StatementsPerMessage, PeakFactor float64
	// HotShare of the traffic goes to HotShards shards (big groups whose
	// conversations hash there); the rest spreads evenly.
	HotShare  float64
	HotShards int
	// Datasources servers with DiskBytes each hold Databases databases.
	Datasources, Databases int
	DiskBytes              int64
}

// SeedWorkload is seed 001's scale (docs/design.md §11): 400 M messages a day
// over the initial 8 x 128 layout, one database per server, with a little
// skew.
func SeedWorkload() Workload {
	return Workload{MessagesPerDay: 400e6, HistoryDays: 30, IndexBytes: 150, BodyBytes: 600,
		StatementsPerMessage: 8, PeakFactor: 3, HotShare: 0.02, HotShards: 4,
		Datasources: 8, Databases: 8, DiskBytes: 4 << 40}
}

// Inputs builds the model's inputs for w.
func (w Workload) Inputs(limits Limits, rate float64, parallel int) (Inputs, error) {
	if w.Datasources <= 0 || w.Databases <= 0 || w.MessagesPerDay <= 0 || w.HotShards < 0 || w.HotShare < 0 || w.HotShare >= 1 {
		return Inputs{}, fmt.Errorf("planner: a workload needs datasources, databases and messages per day, and a hot share in [0,1)")
	}
	var dss []router.Datasource
	for i := range w.Datasources {
		dss = append(dss, router.Datasource{Name: fmt.Sprintf("ds%d", i), Addr: fmt.Sprintf("db%d.example:3306", i), User: "convoy"})
	}
	doc, err := router.DefaultLayout(dss, w.Databases)
	if err != nil {
		return Inputs{}, err
	}
	snap, err := router.NewSnapshot(doc)
	if err != nil {
		return Inputs{}, err
	}
	in := Inputs{Routes: snap, Limits: limits, Rate: rate, Parallel: parallel, Datasources: map[string]Datasource{}}
	even := w.MessagesPerDay * (1 - w.HotShare) / router.NumShards
	for i := range in.Shards {
		perDay := even
		if i < w.HotShards {
			// The first shards stand for the hot ones: which shards are hot
			// does not change the figures.
			perDay += w.MessagesPerDay * w.HotShare / float64(w.HotShards)
		}
		s := &in.Shards[i]
		s.TableRowsPerDay = perDay
		s.TableBytesPerDay = perDay * w.BodyBytes // msg_content is the larger table
		s.BytesPerDay = perDay * (w.IndexBytes + w.BodyBytes)
		s.TableRows = int64(perDay * w.HistoryDays)
		s.TableBytes = int64(s.TableBytesPerDay * w.HistoryDays)
		s.Rows = 2 * s.TableRows // conv_msg and msg_content: one row each per message
		s.Bytes = int64(s.BytesPerDay * w.HistoryDays)
		s.QPS = perDay * w.StatementsPerMessage * w.PeakFactor / 86400
	}
	for i := range in.Shards {
		ds := snap.Target(router.Shard(i)).Datasource
		d := in.Datasources[ds]
		d.Capacity = w.DiskBytes
		d.Used += in.Shards[i].Bytes
		in.Datasources[ds] = d
	}
	return in, nil
}
