package main

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// dataset describes the deterministic data set that --prepare creates and
// the workload reads: conversation ids, message ids, members, plus the
// newest seq known per conversation (moved forward by sends).
type dataset struct {
	o      *options
	newest sync.Map // conv id -> *atomic.Uint64
	seqs   sync.Map // conv id -> *seqCounter (--explicit-seq)
	runID  uint64
	sent   atomic.Uint64
}

func newDataset(o *options) *dataset {
	r := rand.New(rand.NewPCG(o.seed, 0x9e3779b97f4a7c15))
	return &dataset{o: o, runID: r.Uint64() & (1<<29 - 1)}
}

func (d *dataset) numConvs() int { return d.o.convs + d.o.huge }

// convID of index i: ordinary conversations first, then the huge groups.
func (d *dataset) convID(i int) uint64 { return d.o.convBase + uint64(i) }

func (d *dataset) isHuge(conv uint64) bool { return conv >= d.o.convBase+uint64(d.o.convs) }

// msgCount is how many messages --prepare gives a conversation.
func (d *dataset) msgCount(conv uint64) uint64 {
	if d.isHuge(conv) {
		return uint64(d.o.hugeMsgs)
	}
	return uint64(d.o.msgs)
}

// preparedMsgID is the msg_id of a prepared message (below 2^62).
func preparedMsgID(conv, seq uint64) uint64 { return conv<<20 | seq }

// newMsgID is a fresh msg_id for a send: bit 62 set, a per-run prefix and a
// counter, so runs do not collide with each other or with prepared rows.
func (d *dataset) newMsgID() uint64 {
	return 1<<62 | d.runID<<32 | (d.sent.Add(1) & (1<<32 - 1))
}

func (d *dataset) uid(i int) uint64 { return d.o.uidBase + uint64(i%d.o.users) }

// members of a conversation: two users for an ordinary one, 50 for a huge
// group.
func (d *dataset) members(ci int) []uint64 {
	if ci < d.o.convs {
		return []uint64{d.uid(ci), d.uid(ci*7 + 3)}
	}
	h := ci - d.o.convs
	out := make([]uint64, 0, 50)
	for k := 0; k < 50 && k < d.o.users; k++ {
		out = append(out, d.uid(h*50+k))
	}
	return out
}

// newestSeq is the newest seq this process knows of for conv.
func (d *dataset) newestSeq(conv uint64) uint64 {
	if v, ok := d.newest.Load(conv); ok {
		return v.(*atomic.Uint64).Load()
	}
	return d.msgCount(conv)
}

func (d *dataset) sawSeq(conv, seq uint64) {
	v, ok := d.newest.Load(conv)
	if !ok {
		n := &atomic.Uint64{}
		n.Store(d.msgCount(conv))
		v, _ = d.newest.LoadOrStore(conv, n)
	}
	a := v.(*atomic.Uint64)
	for {
		cur := a.Load()
		if seq <= cur || a.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// seqCounter hands out seqs of one conversation for --explicit-seq,
// seeded once from MAX(seq).
type seqCounter struct {
	mu     sync.Mutex
	seeded bool
	next   uint64
}

// picker draws conversations and users for one worker.
type picker struct {
	d    *dataset
	r    *rand.Rand
	zipf *rand.Zipf
}

func newPicker(d *dataset, worker int) *picker {
	r := rand.New(rand.NewPCG(d.o.seed, uint64(worker)+1))
	p := &picker{d: d, r: r}
	if d.o.convs > 1 {
		p.zipf = rand.NewZipf(r, d.o.zipfS, 1, uint64(d.o.convs-1))
	}
	return p
}

// conv: a huge group with probability huge-share, otherwise a Zipf-ranked
// ordinary conversation (rank 0 the most popular).
func (p *picker) conv() uint64 {
	o := p.d.o
	if o.huge > 0 && p.r.Float64() < o.hugeShare {
		return p.d.convID(o.convs + p.r.IntN(o.huge))
	}
	if p.zipf == nil {
		return p.d.convID(0)
	}
	return p.d.convID(int(p.zipf.Uint64()))
}

func (p *picker) user() uint64 { return p.d.uid(p.r.IntN(p.d.o.users)) }
