package cold

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// FileInfo is what the catalog records about one cold file.
type FileInfo struct {
	Key    string
	Shard  int
	Day    time.Time
	Bytes  int64
	SHA256 string      // hex, of the object's bytes
	Digest Digest      // of the rows as the archiver read them from MySQL
	Convs  []ConvRange // ascending by ConvID
}

// ConvRange says that a file holds Rows rows of conversation ConvID with
// seqs in [MinSeq, MaxSeq] (not necessarily contiguous: a conversation's
// day can be split across parts, and warm rows deleted by users leave gaps)
// and msg_ids in [MinMsgID, MaxMsgID] (both 0 in files catalogued before
// they were recorded: unknown).
type ConvRange struct {
	ConvID             uint64
	MinSeq, MaxSeq     uint64
	MinMsgID, MaxMsgID uint64 `json:",omitempty"`
	Rows               int64
}

// extend adds a row (in file order) to the conversation's range of f.
func extend(f *FileInfo, conv, seq, msgID uint64) {
	n := len(f.Convs)
	if n == 0 || f.Convs[n-1].ConvID != conv {
		f.Convs = append(f.Convs, ConvRange{ConvID: conv, MinSeq: seq, MinMsgID: msgID, MaxMsgID: msgID})
		n++
	}
	c := &f.Convs[n-1]
	c.MaxSeq = seq
	c.MinMsgID, c.MaxMsgID = min(c.MinMsgID, msgID), max(c.MaxMsgID, msgID)
	c.Rows++
}

// Range is the FileRange of key that c describes.
func (c ConvRange) Range(key string) FileRange {
	return FileRange{Key: key, MinSeq: c.MinSeq, MaxSeq: c.MaxSeq, MinMsgID: c.MinMsgID, MaxMsgID: c.MaxMsgID, Rows: c.Rows}
}

// FileRange is one file's part of a conversation, as a lookup returns it.
type FileRange struct {
	Key            string
	MinSeq, MaxSeq uint64
	// MinMsgID, MaxMsgID bound the msg_ids (both 0: unknown): a lookup
	// by msg_id skips files outside them, which with time-ordered ids is
	// all but one or two of a conversation's files.
	MinMsgID, MaxMsgID uint64
	// Rows is how many rows of the conversation the file holds (0:
	// unknown): at most that many can come from it, which tells a page
	// read how many files it needs at least.
	Rows int64
	// Skip lists seqs (ascending) whose row in the file must not be
	// served: the warm row was edited or deleted after the file was
	// written, which the archiver found when it came to delete it (package
	// archive). A read treats them as absent from the file.
	Skip []uint64
	// Gaps are seq ranges (inclusive, ascending, disjoint) erased from
	// the conversation (a "clear chat" of archived rows): a read treats
	// every row of the file in them as absent.
	Gaps [][2]uint64
}

// inGaps reports whether seq is in one of the sorted ranges gaps.
func inGaps(gaps [][2]uint64, seq uint64) bool {
	i, _ := slices.BinarySearchFunc(gaps, seq, func(g [2]uint64, s uint64) int { return cmp.Compare(g[1], s) })
	return i < len(gaps) && gaps[i][0] <= seq
}

// outOfGaps moves a read's near end out of the gaps it lies in (Before's
// hi down, After's lo up); lo > hi when nothing is left.
func outOfGaps(gaps [][2]uint64, lo, hi uint64, desc bool) (uint64, uint64) {
	if desc {
		// Descending: lowering hi may land it in an earlier gap.
		for i := len(gaps) - 1; i >= 0; i-- {
			if g := gaps[i]; g[0] <= hi && hi <= g[1] {
				if g[0] == 0 {
					return 1, 0
				}
				hi = g[0] - 1
			}
		}
		return lo, hi
	}
	for _, g := range gaps {
		if g[0] <= lo && lo <= g[1] {
			if g[1] == ^uint64(0) {
				return 1, 0
			}
			lo = g[1] + 1
		}
	}
	return lo, hi
}

// gapsWithin reports whether a gap meets [lo, hi].
func gapsWithin(gaps [][2]uint64, lo, hi uint64) bool {
	return slices.ContainsFunc(gaps, func(g [2]uint64) bool { return g[0] <= hi && g[1] >= lo })
}

// skipped reports whether seq is in the sorted list skip.
func skipped(skip []uint64, seq uint64) bool {
	_, found := slices.BinarySearch(skip, seq)
	return found
}

// Catalog answers "which files hold conversation c", the only question a
// cold read asks before touching storage. The archiver adds a file only
// after it is written and verified; readers never see a file that is not
// complete.
type Catalog interface {
	// Files returns the files holding rows of conv, ascending by MinSeq.
	Files(ctx context.Context, conv uint64) ([]FileRange, error)
}

// MemCatalog is an in-memory Catalog; the archiver's persistent catalog
// (next step) loads into one.
type MemCatalog struct {
	mu    sync.RWMutex
	convs map[uint64][]FileRange
}

var _ Catalog = (*MemCatalog)(nil)

// NewMemCatalog returns an empty catalog.
func NewMemCatalog() *MemCatalog { return &MemCatalog{convs: map[uint64][]FileRange{}} }

// Add records f's conversations. Adding the same key again is a no-op, so
// replaying a catalog log is safe.
func (c *MemCatalog) Add(f FileInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range f.Convs {
		list := c.convs[r.ConvID]
		if slices.ContainsFunc(list, func(x FileRange) bool { return x.Key == f.Key }) {
			continue
		}
		list = append(list, r.Range(f.Key))
		slices.SortFunc(list, func(a, b FileRange) int {
			if a.MinSeq != b.MinSeq {
				return cmp.Compare(a.MinSeq, b.MinSeq)
			}
			return cmp.Compare(a.Key, b.Key)
		})
		c.convs[r.ConvID] = list
	}
}

// Files implements Catalog.
func (c *MemCatalog) Files(_ context.Context, conv uint64) ([]FileRange, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return slices.Clone(c.convs[conv]), nil
}
