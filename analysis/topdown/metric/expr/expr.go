// Package expr is the formula language of metric definitions: the syntax Intel's
// TMA metrics and Linux perf's metric JSON are written in. It has + - * /, unary
// minus, parentheses, comparisons (< > <= >= == !=), & and | (also "and", "or"),
// "x if cond else y", min, max and d_ratio, numbers, and names. A name may contain
// dots and colons (UOPS_RETIRED.MS:c1:e1), start with # (perf's #slots), or be a
// perf term in @…@ (cpu@event\,cmask\=0x6@).
//
// A formula is parsed once into a Program, a flat stack program evaluated without
// allocation. a / 0 is NaN, not computed, as perf's own parser refuses it;
// d_ratio(a, 0) is 0, for the formulas whose authors chose that. A missing
// input is NaN and makes every result that depends on it NaN, so callers can
// leave such a metric out instead of inventing a number; the branch not taken by
// "if else" does not count as a dependency.
package expr

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Error is a syntax or name error at a byte offset of the formula.
type Error struct {
	Formula string
	Offset  int
	Msg     string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s at column %d of %q", e.Msg, e.Offset+1, e.Formula)
}

type op uint8

const (
	opConst op = iota // push consts[arg]
	opVar             // push vars[arg]
	opNeg
	opAdd
	opSub
	opMul
	opDiv   // a / b: NaN (not computed) when b is 0, as perf's parser refuses it
	opRatio // d_ratio(a, b): 0 when b is 0
	opLT
	opGT
	opLE
	opGE
	opEQ
	opNE
	opAnd
	opOr
	opSelect // pop else, then, cond: push cond != 0 ? then : else
	opMin    // arg operands
	opMax    // arg operands
)

type instr struct {
	op  op
	arg int32
}

// Program is a compiled formula.
type Program struct {
	code     []instr
	consts   []float64
	maxStack int
	// Names lists the variable names the formula uses, in slot order as given
	// by the resolver.
	Names []string
}

// Resolver maps a name to its slot in the values slice passed to Eval.
type Resolver func(name string) (slot int, ok bool)

// Compile parses formula and resolves its names. Unknown names are an error that
// names them and their position.
func Compile(formula string, resolve Resolver) (*Program, error) {
	p := &parser{src: formula, resolve: resolve, prog: &Program{}}
	if err := p.next(); err != nil {
		return nil, err
	}
	if err := p.parseExpr(); err != nil {
		return nil, err
	}
	if p.tok.kind != tEOF {
		return nil, p.errorf("unexpected %s", p.tok)
	}
	p.prog.maxStack = stackDepth(p.prog.code)
	return p.prog, nil
}

// Vars lists every name in formula, in order of first use, without resolving them.
func Vars(formula string) ([]string, error) {
	var names []string
	seen := map[string]bool{}
	_, err := Compile(formula, func(n string) (int, bool) {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
		return 0, true
	})
	return names, err
}

func stackDepth(code []instr) int {
	depth, max := 0, 0
	for _, in := range code {
		switch in.op {
		case opConst, opVar:
			depth++
		case opNeg:
		case opSelect:
			depth -= 2
		case opMin, opMax:
			depth -= int(in.arg) - 1
		default:
			depth--
		}
		if depth > max {
			max = depth
		}
	}
	return max
}

// StackSize is the scratch length Eval needs.
func (p *Program) StackSize() int { return p.maxStack }

// Eval runs the program over values using stack as scratch (len >= StackSize());
// it does not allocate.
func (p *Program) Eval(values, stack []float64) float64 {
	sp := 0
	for _, in := range p.code {
		switch in.op {
		case opConst:
			stack[sp] = p.consts[in.arg]
			sp++
		case opVar:
			stack[sp] = values[in.arg]
			sp++
		case opNeg:
			stack[sp-1] = -stack[sp-1]
		case opSelect:
			c, t, e := stack[sp-3], stack[sp-2], stack[sp-1]
			sp -= 2
			switch {
			case math.IsNaN(c):
				stack[sp-1] = math.NaN()
			case c != 0:
				stack[sp-1] = t
			default:
				stack[sp-1] = e
			}
		case opMin, opMax:
			n := int(in.arg)
			r := stack[sp-n]
			for _, v := range stack[sp-n+1 : sp] {
				if math.IsNaN(v) || math.IsNaN(r) {
					r = math.NaN()
				} else if (in.op == opMin) == (v < r) {
					r = v
				}
			}
			sp -= n - 1
			stack[sp-1] = r
		default:
			a, b := stack[sp-2], stack[sp-1]
			sp--
			stack[sp-1] = binary(in.op, a, b)
		}
	}
	return stack[0]
}

func binary(o op, a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	switch o {
	case opAdd:
		return a + b
	case opSub:
		return a - b
	case opMul:
		return a * b
	case opDiv:
		if b == 0 {
			return math.NaN()
		}
		return a / b
	case opRatio:
		if b == 0 {
			return 0
		}
		return a / b
	case opLT:
		return truth(a < b)
	case opGT:
		return truth(a > b)
	case opLE:
		return truth(a <= b)
	case opGE:
		return truth(a >= b)
	case opEQ:
		return truth(a == b)
	case opNE:
		return truth(a != b)
	case opAnd:
		return truth(a != 0 && b != 0)
	case opOr:
		return truth(a != 0 || b != 0)
	}
	panic("expr: unknown operator") // unreachable: the compiler emits only the ops above
}

func truth(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ---- lexer ----

type kind uint8

const (
	tEOF kind = iota
	tNum
	tName
	tOp // + - * / ( ) , < > <= >= == != & |
	tIf
	tElse
	tAnd
	tOr
)

type token struct {
	kind kind
	text string
	num  float64
	pos  int
}

func (t token) String() string {
	switch t.kind {
	case tEOF:
		return "end of formula"
	case tNum:
		return "number " + t.text
	case tName:
		return "name " + t.text
	}
	return fmt.Sprintf("%q", t.text)
}

type parser struct {
	src     string
	pos     int
	tok     token
	resolve Resolver
	prog    *Program
	depth   int
}

func (p *parser) errorf(format string, args ...any) error {
	return &Error{Formula: p.src, Offset: p.tok.pos, Msg: fmt.Sprintf(format, args...)}
}

// allDigits says whether s is decimal digits only.
func allDigits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func isNameStart(c byte) bool {
	return c == '_' || c == '#' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isNameByte(c byte) bool {
	return isNameStart(c) || c >= '0' && c <= '9' || c == '.' || c == ':'
}

func (p *parser) next() error {
	s := p.src
	for p.pos < len(s) && (s[p.pos] == ' ' || s[p.pos] == '\t' || s[p.pos] == '\n' || s[p.pos] == '\r') {
		p.pos++
	}
	start := p.pos
	if p.pos >= len(s) {
		p.tok = token{kind: tEOF, pos: start}
		return nil
	}
	c := s[p.pos]
	switch {
	case c >= '0' && c <= '9' || c == '.' && p.pos+1 < len(s) && s[p.pos+1] >= '0' && s[p.pos+1] <= '9':
		end := p.pos
		for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' || s[end] == 'e' || s[end] == 'E' ||
			(s[end] == '-' || s[end] == '+') && (s[end-1] == 'e' || s[end-1] == 'E') ||
			s[end] == 'x' || s[end] == 'X' || (s[end] >= 'a' && s[end] <= 'f') || (s[end] >= 'A' && s[end] <= 'F')) {
			end++
		}
		text := s[p.pos:end]
		if allDigits(text) && end < len(s) && isNameStart(s[end]) && s[end] != '#' {
			// A name that starts with digits, as Intel's 4K_Aliasing does.
			for end < len(s) && isNameByte(s[end]) {
				end++
			}
			p.tok = token{kind: tName, text: s[p.pos:end], pos: start}
			p.pos = end
			return nil
		}
		v, err := parseNumber(text)
		if err != nil {
			p.tok = token{pos: start}
			return p.errorf("bad number %q", text)
		}
		p.pos = end
		p.tok = token{kind: tNum, text: text, num: v, pos: start}
	case c == '@':
		end := strings.IndexByte(s[p.pos+1:], '@')
		if end < 0 {
			p.tok = token{pos: start}
			return p.errorf("unterminated @ term")
		}
		text := s[p.pos+1 : p.pos+1+end]
		p.pos += end + 2
		// perf escapes the term's commas and equals signs: cpu@event\,cmask\=0x6@.
		name := strings.NewReplacer(`\,`, ",", `\=`, "=").Replace(text)
		p.tok = token{kind: tName, text: "@" + name + "@", pos: start}
	case isNameStart(c):
		end := p.pos
		for end < len(s) && (isNameByte(s[end]) || s[end] == '\\' && end+1 < len(s)) {
			if s[end] == '\\' {
				end++ // perf escapes characters inside names: cpu\@event\@
			}
			end++
		}
		text := s[p.pos:end]
		p.pos = end
		if p.pos < len(s) && s[p.pos] == '@' {
			// perf's pmu@term,term@ is pmu/term,term/.
			close := strings.IndexByte(s[p.pos+1:], '@')
			if close < 0 {
				return p.errorf("unterminated @ term")
			}
			term := strings.NewReplacer(`\,`, ",", `\=`, "=").Replace(s[p.pos+1 : p.pos+1+close])
			p.pos += close + 2
			p.tok = token{kind: tName, text: text + "/" + term + "/", pos: start}
			return nil
		}
		if strings.HasPrefix(text, "metric_") && strings.HasPrefix(s[p.pos:], "(%)") {
			// Intel's E-core thresholds name metrics as metric_TMA_..Name(%).
			p.pos += 3
			text += "(%)"
		}
		switch text {
		case "if":
			p.tok = token{kind: tIf, text: text, pos: start}
		case "else":
			p.tok = token{kind: tElse, text: text, pos: start}
		case "and":
			p.tok = token{kind: tAnd, text: text, pos: start}
		case "or":
			p.tok = token{kind: tOr, text: text, pos: start}
		default:
			p.tok = token{kind: tName, text: strings.ReplaceAll(text, `\`, ""), pos: start}
		}
	default:
		two := ""
		if p.pos+1 < len(s) {
			two = s[p.pos : p.pos+2]
		}
		switch two {
		case "<=", ">=", "==", "!=", "&&", "||":
			p.pos += 2
			p.tok = token{kind: tOp, text: two, pos: start}
			return nil
		}
		if c == '<' || c == '>' || c == '!' || c == '=' {
			// Intel's files sometimes write "> =": allow blanks inside the operator.
			j := p.pos + 1
			for j < len(s) && s[j] == ' ' {
				j++
			}
			if j < len(s) && s[j] == '=' {
				p.pos = j + 1
				p.tok = token{kind: tOp, text: string(c) + "=", pos: start}
				return nil
			}
		}
		if !strings.ContainsRune("+-*/(),<>&|", rune(c)) {
			p.tok = token{pos: start}
			return p.errorf("unexpected character %q", c)
		}
		p.pos++
		p.tok = token{kind: tOp, text: string(c), pos: start}
	}
	return nil
}

func parseNumber(s string) (float64, error) {
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		v, err := strconv.ParseUint(s[2:], 16, 64)
		return float64(v), err
	}
	return strconv.ParseFloat(s, 64)
}

// ---- parser: precedence climbing ----
//
//	expr    := or ["if" or "else" expr]
//	or      := and {("|" | "||" | "or") and}
//	and     := cmp {("&" | "&&" | "and") cmp}
//	cmp     := sum [("<"|">"|"<="|">="|"=="|"!=") sum]
//	sum     := product {("+"|"-") product}
//	product := unary {("*"|"/") unary}
//	unary   := "-" unary | primary
//	primary := number | name | name "(" expr {"," expr} ")" | "(" expr ")"

const maxDepth = 200 // nesting bound, so hostile input cannot exhaust the stack

func (p *parser) emit(o op, arg int) { p.prog.code = append(p.prog.code, instr{o, int32(arg)}) }

func (p *parser) isOp(texts ...string) bool {
	if p.tok.kind != tOp {
		return false
	}
	for _, t := range texts {
		if p.tok.text == t {
			return true
		}
	}
	return false
}

func (p *parser) parseExpr() error {
	if p.depth++; p.depth > maxDepth {
		return p.errorf("formula nests deeper than %d", maxDepth)
	}
	defer func() { p.depth-- }()
	start := len(p.prog.code)
	if err := p.parseOr(); err != nil {
		return err
	}
	if p.tok.kind != tIf {
		return nil
	}
	// "then if cond else other": the code so far is the then-part; the select
	// instruction wants cond, then, else on the stack, so move then after cond.
	then := append([]instr(nil), p.prog.code[start:]...)
	p.prog.code = p.prog.code[:start]
	if err := p.next(); err != nil {
		return err
	}
	if err := p.parseOr(); err != nil {
		return err
	}
	if p.tok.kind != tElse {
		return p.errorf("expected else, found %s", p.tok)
	}
	p.prog.code = append(p.prog.code, then...)
	if err := p.next(); err != nil {
		return err
	}
	if err := p.parseExpr(); err != nil {
		return err
	}
	p.emit(opSelect, 0)
	return nil
}

func (p *parser) binaryLevel(sub func() error, ops map[string]op, words map[kind]op) error {
	if err := sub(); err != nil {
		return err
	}
	for {
		var o op
		var ok bool
		if p.tok.kind == tOp {
			o, ok = ops[p.tok.text]
		} else {
			o, ok = words[p.tok.kind]
		}
		if !ok {
			return nil
		}
		if err := p.next(); err != nil {
			return err
		}
		if err := sub(); err != nil {
			return err
		}
		p.emit(o, 0)
	}
}

var (
	orOps   = map[string]op{"|": opOr, "||": opOr}
	orWords = map[kind]op{tOr: opOr}
	andOps  = map[string]op{"&": opAnd, "&&": opAnd}
	andWord = map[kind]op{tAnd: opAnd}
	cmpOps  = map[string]op{"<": opLT, ">": opGT, "<=": opLE, ">=": opGE, "==": opEQ, "!=": opNE}
	sumOps  = map[string]op{"+": opAdd, "-": opSub}
	mulOps  = map[string]op{"*": opMul, "/": opDiv}
)

func (p *parser) parseOr() error  { return p.binaryLevel(p.parseAnd, orOps, orWords) }
func (p *parser) parseAnd() error { return p.binaryLevel(p.parseCmp, andOps, andWord) }

func (p *parser) parseCmp() error {
	if err := p.parseSum(); err != nil {
		return err
	}
	if o, ok := cmpOps[p.tok.text]; ok && p.tok.kind == tOp {
		if err := p.next(); err != nil {
			return err
		}
		if err := p.parseSum(); err != nil {
			return err
		}
		p.emit(o, 0)
	}
	return nil
}

func (p *parser) parseSum() error     { return p.binaryLevel(p.parseProduct, sumOps, nil) }
func (p *parser) parseProduct() error { return p.binaryLevel(p.parseUnary, mulOps, nil) }

func (p *parser) parseUnary() error {
	if p.isOp("-") {
		if p.depth++; p.depth > maxDepth {
			return p.errorf("formula nests deeper than %d", maxDepth)
		}
		defer func() { p.depth-- }()
		if err := p.next(); err != nil {
			return err
		}
		if err := p.parseUnary(); err != nil {
			return err
		}
		p.emit(opNeg, 0)
		return nil
	}
	return p.parsePrimary()
}

func (p *parser) parsePrimary() error {
	t := p.tok
	switch {
	case t.kind == tNum:
		p.prog.consts = append(p.prog.consts, t.num)
		p.emit(opConst, len(p.prog.consts)-1)
		return p.next()
	case t.kind == tName:
		if err := p.next(); err != nil {
			return err
		}
		if p.isOp("(") {
			return p.parseCall(t)
		}
		slot, ok := p.resolve(t.text)
		if !ok {
			p.tok = t
			return p.errorf("unknown name %q", t.text)
		}
		p.prog.Names = append(p.prog.Names, t.text)
		p.emit(opVar, slot)
		return nil
	case p.isOp("("):
		if err := p.next(); err != nil {
			return err
		}
		if err := p.parseExpr(); err != nil {
			return err
		}
		if !p.isOp(")") {
			return p.errorf("expected ), found %s", p.tok)
		}
		return p.next()
	}
	return p.errorf("expected a number, a name or (, found %s", t)
}

func (p *parser) parseCall(fn token) error {
	var o op
	switch fn.text {
	case "min":
		o = opMin
	case "max":
		o = opMax
	case "d_ratio":
		o = opRatio
	default:
		p.tok = fn
		return p.errorf("unknown function %q (functions: min, max, d_ratio)", fn.text)
	}
	n := 0
	for {
		if err := p.next(); err != nil {
			return err
		}
		if err := p.parseExpr(); err != nil {
			return err
		}
		n++
		if p.isOp(")") {
			break
		}
		if !p.isOp(",") {
			return p.errorf("expected , or ) in %s(), found %s", fn.text, p.tok)
		}
	}
	if err := p.next(); err != nil {
		return err
	}
	if o == opRatio {
		if n != 2 {
			p.tok = fn
			return p.errorf("d_ratio takes 2 arguments, got %d", n)
		}
		p.emit(opRatio, 0)
		return nil
	}
	if n < 2 {
		p.tok = fn
		return p.errorf("%s takes at least 2 arguments, got %d", fn.text, n)
	}
	p.emit(o, n)
	return nil
}
