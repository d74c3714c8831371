package archive

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.uber.org/zap"
)

// Compaction. A shard's history is one file (or a few parts) per day,
// which for a quiet shard are small: a conversation with a message a day
// then spreads a 20-row page over 20 files, 2-4 object reads each. Each
// run merges the shard's small files (fewer rows than CompactBelow) of
// up to compactSpan consecutive days into files of up to PartRows rows,
// sorted by conversation as every file is, with the erase step's
// machinery (rewriteFiles: one new part of the group's newest day,
// recorded, the read bounds of all the group's files swapped to it in one
// transaction, the old files superseded), dropping what users deleted on
// the way. Retention deletes a compacted file when its newest day is
// past it: its rows outlive the retention by at most compactSpan.

// compactSpan bounds the days one compacted file spans.
const compactSpan = 31 * 24 * time.Hour

// compactDue merges the shard's small deleted history files, a group at a
// time, oldest first.
func (u *run) compactDue(ctx context.Context) error {
	if u.a.cfg.CompactBelow < 0 {
		return nil
	}
	recs, err := u.records(ctx)
	if err != nil {
		return err
	}
	small := slices.DeleteFunc(recs, func(r Record) bool {
		return r.Kind != kindHistory || r.State != StateDeleted || r.legacy() || r.Rows >= int64(u.a.cfg.CompactBelow)
	})
	slices.SortStableFunc(small, func(a, b Record) int { return compareDays(a, b) })
	var group []Record
	rows := int64(0)
	flush := func() error {
		defer func() { group, rows = nil, 0 }()
		if len(group) < 2 {
			return nil
		}
		if err := u.check(ctx); err != nil {
			return err
		}
		err := u.rewriteFiles(ctx, group)
		if errors.Is(err, errMixedColumns) {
			u.log.Warn("cold files of other column definitions are not merged", zap.String("from", group[0].Key))
			return nil
		}
		return err
	}
	for _, r := range small {
		if len(group) > 0 && (rows+r.Rows > int64(u.a.cfg.PartRows) || daySpan(group[0], r) > compactSpan) {
			if err := flush(); err != nil {
				return err
			}
		}
		group = append(group, r)
		rows += r.Rows
	}
	return flush()
}

// compareDays orders records by their newest day, then part.
func compareDays(a, b Record) int {
	if a.Day != b.Day {
		if a.Day < b.Day {
			return -1
		}
		return 1
	}
	return a.Part - b.Part
}

// daySpan is the time from first's oldest day to r's newest.
func daySpan(first, r Record) time.Duration {
	from, err1 := time.Parse(dayLayout, first.FirstDay)
	if err1 != nil {
		from, err1 = time.Parse(dayLayout, first.Day)
	}
	to, err2 := time.Parse(dayLayout, r.Day)
	if err1 != nil || err2 != nil {
		return compactSpan + 1 // unreadable: never grouped
	}
	return to.Sub(from)
}
