package rewrite

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
)

// LoadData is a LOAD DATA LOCAL INFILE statement (KindLoadData). No server
// sees it: Convoy asks the client for the file, cuts it into rows as
// MariaDB would (package proxy/loadfile) and writes them with INSERT
// statements it builds from Insert.
type LoadData struct {
	File  string
	Table *ast.TableName
	// Replace: REPLACE. A LOCAL load without it ignores duplicates and
	// bad values, with IGNORE or without (MariaDB: the server cannot stop
	// the client's file half way).
	Replace bool
	// Charset is CHARACTER SET, lower-case; "" when not given.
	Charset string
	// The FIELDS and LINES clauses; nil where not given.
	FieldsTerm, Enclosed, Escaped, LinesStart, LinesTerm *string
	IgnoreLines                                          uint64
	// Targets are the column list: what each field of a row goes to. Nil
	// when the statement has none (every column of the table, in order).
	Targets []LoadTarget
	// Sets are the SET clause's assignments.
	Sets []LoadSet
}

// LoadTarget is a column (Column) or a user variable (Var, lower-case).
type LoadTarget struct {
	Column string
	Var    string
}

// LoadSet is one SET assignment. Expr is the expression as SQL with a `?`
// where it reads a user variable of the column list; Vars are those
// variables' Targets indexes, in the order of the `?`s.
type LoadSet struct {
	Column string
	Expr   string
	Vars   []int
}

// loadVarMark starts the name that stands for a file variable in a
// restored SET expression: the variable's Targets index follows.
const loadVarMark = "`\x00convoy_load_var_"

// analyzeLoadData reads a LOAD DATA LOCAL statement.
func analyzeLoadData(s *ast.LoadDataStmt) (*LoadData, error) {
	if s.Format != nil || len(s.Options) > 0 || s.FieldsInfo != nil && (s.FieldsInfo.DefinedNullBy != nil || s.FieldsInfo.NullValueOptEnclosed) {
		return nil, unsupported("LOAD DATA ... FORMAT / WITH / NULL DEFINED BY are not MariaDB syntax")
	}
	l := &LoadData{File: s.Path, Table: s.Table, IgnoreLines: 0}
	l.Replace = s.OnDuplicate == ast.OnDuplicateKeyHandlingReplace
	if s.Charset != nil {
		l.Charset = strings.ToLower(*s.Charset)
	}
	if f := s.FieldsInfo; f != nil {
		l.FieldsTerm, l.Enclosed, l.Escaped = f.Terminated, f.Enclosed, f.Escaped
	}
	if li := s.LinesInfo; li != nil {
		l.LinesStart, l.LinesTerm = li.Starting, li.Terminated
	}
	if s.IgnoreLines != nil {
		l.IgnoreLines = *s.IgnoreLines
	}
	vars := map[string]int{}
	for _, cv := range s.ColumnsAndUserVars {
		switch {
		case cv.ColumnName != nil:
			l.Targets = append(l.Targets, LoadTarget{Column: cv.ColumnName.Name.O})
		case cv.UserVar != nil:
			name := strings.ToLower(cv.UserVar.Name)
			if _, ok := vars[name]; !ok {
				vars[name] = len(l.Targets)
			}
			l.Targets = append(l.Targets, LoadTarget{Var: name})
		}
	}
	for _, as := range s.ColumnAssignments {
		m := &loadVarMarker{vars: vars}
		expr, ok := as.Expr.Accept(m)
		if !ok {
			return nil, unsupported("LOAD DATA's SET %s cannot be read", as.Column.Name.O)
		}
		text, err := Restore(expr.(ast.ExprNode))
		if err != nil {
			return nil, fmt.Errorf("LOAD DATA's SET %s: %w", as.Column.Name.O, err)
		}
		set := LoadSet{Column: as.Column.Name.O}
		// The marks in the order they are printed, which is the order
		// of the `?`s.
		var sb strings.Builder
		for {
			i := strings.Index(text, loadVarMark)
			if i < 0 {
				break
			}
			sb.WriteString(text[:i])
			rest := text[i+len(loadVarMark):]
			end := strings.IndexByte(rest, '`')
			at, err := strconv.Atoi(rest[:max(end, 0)])
			if end < 0 || err != nil {
				return nil, unsupported("LOAD DATA's SET %s cannot be printed back", as.Column.Name.O)
			}
			sb.WriteByte('?')
			set.Vars = append(set.Vars, at)
			text = rest[end+1:]
		}
		sb.WriteString(text)
		if len(set.Vars) != m.n {
			return nil, unsupported("LOAD DATA's SET %s cannot be printed back", as.Column.Name.O)
		}
		set.Expr = sb.String()
		l.Sets = append(l.Sets, set)
	}
	return l, nil
}

// loadVarMarker replaces the file's variables in a SET expression by a
// column name no table has, noting which, so that the printed expression
// can take each row's value in their place.
type loadVarMarker struct {
	vars map[string]int
	n    int
}

func (m *loadVarMarker) Enter(n ast.Node) (ast.Node, bool) { return n, false }

func (m *loadVarMarker) Leave(n ast.Node) (ast.Node, bool) {
	v, ok := n.(*ast.VariableExpr)
	if !ok || v.IsSystem || v.Value != nil {
		return n, true
	}
	at, ok := m.vars[strings.ToLower(v.Name)]
	if !ok {
		return n, true // a session variable: the INSERT reads it
	}
	m.n++
	return &ast.ColumnNameExpr{Name: &ast.ColumnName{Name: ast.NewCIStr("\x00convoy_load_var_" + strconv.Itoa(at))}}, true
}
