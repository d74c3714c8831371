package engine

import (
	"bytes"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/router"
)

// fixFields makes result metadata name the logical table and database, as a
// client talking to one plain MySQL would see it (conv_msg in db im, not
// conv_msg_0441 in im_3). Drivers that map columns by table name need this.
func fixFields(r *mysql.Result, db string) {
	if r == nil || r.Resultset == nil {
		return
	}
	fixFieldList(r.Fields, db)
}

func fixFieldList(fs []*mysql.Field, db string) {
	var dbName []byte
	for _, f := range fs {
		logical, ok := logicalName(f.OrgTable)
		if !ok {
			continue
		}
		if dbName == nil {
			dbName = []byte(db)
		}
		if string(f.Table) == string(f.OrgTable) {
			f.Table = logical
		}
		f.OrgTable = logical
		f.Schema = dbName
		f.Data = nil // Dump re-encodes from the fields only when Data is nil
	}
}

// logicalNames are the logical table names as field bytes, shared by every
// renamed column definition (never written to).
var logicalNames = func() map[string][]byte {
	m := map[string][]byte{}
	for _, t := range router.ShardedTables() {
		m[t] = []byte(t)
	}
	return m
}()

// decodeRows fills r.Values from the raw rows of a text-protocol result, for
// the few results Convoy reads itself: backends hand rows over undecoded,
// since most go to the client unchanged.
func decodeRows(r *mysql.Result) error {
	if r == nil || r.Resultset == nil || r.Values != nil {
		return nil
	}
	vals := make([][]mysql.FieldValue, len(r.RowDatas))
	for i, row := range r.RowDatas {
		v, err := row.Parse(r.Fields, false, nil)
		if err != nil {
			return err
		}
		vals[i] = v
	}
	r.Values = vals
	return nil
}

// logicalName maps a physical table name (conv_msg_0441) to its logical name.
func logicalName(phys []byte) ([]byte, bool) {
	i := bytes.LastIndexByte(phys, '_')
	if i < 0 || len(phys)-i-1 != 4 {
		return nil, false
	}
	for _, c := range phys[i+1:] {
		if c < '0' || c > '9' {
			return nil, false
		}
	}
	name, ok := logicalNames[string(phys[:i])]
	return name, ok
}
