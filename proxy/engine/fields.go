package engine

import (
	"strings"

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
	for _, f := range fs {
		logical, ok := logicalName(string(f.OrgTable))
		if !ok {
			continue
		}
		if string(f.Table) == string(f.OrgTable) {
			f.Table = []byte(logical)
		}
		f.OrgTable = []byte(logical)
		f.Schema = []byte(db)
		f.Data = nil // Dump re-encodes from the fields only when Data is nil
	}
}

// logicalName maps a physical table name (conv_msg_0441) to its logical name.
func logicalName(phys string) (string, bool) {
	i := strings.LastIndexByte(phys, '_')
	if i < 0 || len(phys)-i-1 != 4 {
		return "", false
	}
	for _, c := range phys[i+1:] {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	if _, ok := router.ShardKeyColumn(phys[:i]); !ok {
		return "", false
	}
	return phys[:i], true
}
