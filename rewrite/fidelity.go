package rewrite

import (
	"fmt"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/format"
	"github.com/pingcap/tidb/pkg/parser/mysql"
	"github.com/pingcap/tidb/pkg/parser/test_driver"
)

// The restorer prints a statement that means the same to TiDB, but two of its
// normalisations change what MySQL/MariaDB return:
//
//   - column names: a result column without alias is named after the text the
//     client typed (`COUNT(*)`, `HEX(content)`); the restorer prints
//     `COUNT(1)`, `HEX(`content`)`, and the client would see those names.
//   - hexadecimal and bit literals: `0x2A` is the number 42 in a numeric
//     context, but the restorer prints `x'2a'`, which MariaDB compares as the
//     string '*' (so `conv_id = 0x2A` would silently match nothing).
//
// keepSourceForms puts the client's own forms back for the restore and
// returns the function that undoes it, so the AST is left as parsed.
func keepSourceForms(stmt ast.StmtNode) (undo func()) {
	var undos []func()
	src := stmt.OriginalText()
	// Column names of the result set come from the outermost SELECT (the first
	// one of a UNION).
	var sel *ast.SelectStmt
	switch s := stmt.(type) {
	case *ast.SelectStmt:
		sel = s
	case *ast.SetOprStmt:
		if s.SelectList != nil && len(s.SelectList.Selects) > 0 {
			sel, _ = s.SelectList.Selects[0].(*ast.SelectStmt)
		}
	}
	if sel != nil && sel.Fields != nil {
		for _, f := range sel.Fields.Fields {
			if f.WildCard != nil || f.AsName.O != "" || f.Expr == nil {
				continue
			}
			switch f.Expr.(type) {
			case *ast.ColumnNameExpr, *test_driver.ValueExpr, *test_driver.ParamMarkerExpr:
				continue // restored names already match what MySQL shows
			}
			// The last field of an executable comment (SELECT 1 /*! , x */)
			// spans the comment's end in the parser's text; MariaDB's name
			// stops before it.
			text := strings.TrimSpace(f.Text())
			if strings.HasSuffix(text, "*/") && !strings.Contains(text, "/*") {
				text = strings.TrimSpace(strings.TrimSuffix(text, "*/"))
			}
			if text == "" {
				continue
			}
			field := f
			field.AsName = ast.NewCIStr(text)
			undos = append(undos, func() { field.AsName = ast.CIStr{} })
		}
	}
	// A statement of a multi-statement text keeps the parser's offsets
	// into the whole text; its own starts at its OriginTextPosition (set
	// by the splitter; 0 for a text parsed alone).
	v := &literalKeeper{src: src, base: stmt.OriginTextPosition()}
	stmt.Accept(v)
	if len(v.swapped) > 0 {
		undos = append(undos, func() { stmt.Accept(&literalRestorer{}) })
	}
	return func() {
		for _, u := range undos {
			u()
		}
	}
}

// verbatimLiteral restores as the exact token the client wrote.
type verbatimLiteral struct {
	*test_driver.ValueExpr
	token string
}

func (v *verbatimLiteral) Restore(ctx *format.RestoreCtx) error {
	ctx.WritePlain(v.token)
	return nil
}

func (v *verbatimLiteral) Accept(vis ast.Visitor) (ast.Node, bool) {
	n, skip := vis.Enter(v)
	if skip {
		return vis.Leave(n)
	}
	return vis.Leave(n)
}

type literalKeeper struct {
	src     string
	base    int // where src starts in the text the parser read
	swapped []*verbatimLiteral
}

func (k *literalKeeper) Enter(n ast.Node) (ast.Node, bool) { return n, false }

func (k *literalKeeper) Leave(n ast.Node) (ast.Node, bool) {
	ve, ok := n.(*test_driver.ValueExpr)
	if !ok || ve.Kind() != test_driver.KindBinaryLiteral {
		return n, true
	}
	tok, ok := numericLiteralToken(k.src, ve.OriginTextPosition()-k.base, ve)
	if !ok {
		return n, true
	}
	w := &verbatimLiteral{ValueExpr: ve, token: tok}
	k.swapped = append(k.swapped, w)
	return w, true
}

// numericLiteralToken returns the 0x... / 0b... token at the literal's
// position in src (off), if the literal was written in that
// (numeric-capable) form and the token denotes exactly the parsed value.
func numericLiteralToken(src string, off int, ve *test_driver.ValueExpr) (string, bool) {
	if off < 0 || off+2 > len(src) || src[off] != '0' {
		return "", false
	}
	end := off + 2
	for end < len(src) && isAlnum(src[end]) {
		end++
	}
	tok := src[off:end]
	var want string
	switch {
	case tok[1] == 'x' || tok[1] == 'X':
		want = fmt.Sprintf("%x", ve.GetBytes())
		got := strings.TrimLeft(strings.ToLower(tok[2:]), "0")
		if strings.TrimLeft(want, "0") != got {
			return "", false
		}
	case tok[1] == 'b' || tok[1] == 'B':
		if ve.Type.GetFlag()&mysql.UnsignedFlag != 0 {
			return "", false // a hex literal cannot have been written as 0b
		}
		for _, c := range tok[2:] {
			if c != '0' && c != '1' {
				return "", false
			}
		}
	default:
		return "", false
	}
	return tok, true
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// literalRestorer swaps verbatimLiteral wrappers back for the parsed nodes.
type literalRestorer struct{}

func (literalRestorer) Enter(n ast.Node) (ast.Node, bool) { return n, false }

func (literalRestorer) Leave(n ast.Node) (ast.Node, bool) {
	if w, ok := n.(*verbatimLiteral); ok {
		return w.ValueExpr, true
	}
	return n, true
}
