package qstashdev

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Upstash-Retry-Delay is an arithmetic expression over the variable "retried"
// whose value is a delay in milliseconds. It comes from an HTTP header, so the
// evaluator is deliberately small: numbers, one variable, + - * /, unary
// minus, parentheses and a fixed function table. No loops, no lookups, and
// bounded length and depth, so no header can make it run long.

const (
	maxExprLen   = 512
	maxExprDepth = 32
)

// delayExpr is a compiled Upstash-Retry-Delay expression.
type delayExpr struct {
	src  string
	root exprNode
}

type exprNode interface {
	eval(retried float64) float64
}

type (
	numNode float64
	varNode struct{}
	negNode struct{ x exprNode }
	binNode struct {
		op   byte
		l, r exprNode
	}
	callNode struct {
		fn   exprFunc
		args []exprNode
	}
)

func (n numNode) eval(float64) float64   { return float64(n) }
func (varNode) eval(r float64) float64   { return r }
func (n negNode) eval(r float64) float64 { return -n.x.eval(r) }
func (n binNode) eval(r float64) float64 {
	l, rr := n.l.eval(r), n.r.eval(r)
	switch n.op {
	case '+':
		return l + rr
	case '-':
		return l - rr
	case '*':
		return l * rr
	default:
		return l / rr
	}
}
func (n callNode) eval(r float64) float64 {
	args := make([]float64, len(n.args))
	for i, a := range n.args {
		args[i] = a.eval(r)
	}
	return n.fn.f(args)
}

type exprFunc struct {
	minArgs, maxArgs int // maxArgs < 0: variadic
	f                func([]float64) float64
}

var exprFuncs = map[string]exprFunc{
	"pow":   {2, 2, func(a []float64) float64 { return math.Pow(a[0], a[1]) }},
	"sqrt":  {1, 1, func(a []float64) float64 { return math.Sqrt(a[0]) }},
	"abs":   {1, 1, func(a []float64) float64 { return math.Abs(a[0]) }},
	"exp":   {1, 1, func(a []float64) float64 { return math.Exp(a[0]) }},
	"floor": {1, 1, func(a []float64) float64 { return math.Floor(a[0]) }},
	"ceil":  {1, 1, func(a []float64) float64 { return math.Ceil(a[0]) }},
	"round": {1, 1, func(a []float64) float64 { return math.Round(a[0]) }},
	"min": {1, -1, func(a []float64) float64 {
		m := a[0]
		for _, v := range a[1:] {
			m = math.Min(m, v)
		}
		return m
	}},
	"max": {1, -1, func(a []float64) float64 {
		m := a[0]
		for _, v := range a[1:] {
			m = math.Max(m, v)
		}
		return m
	}},
}

// parseDelayExpr compiles an Upstash-Retry-Delay expression.
func parseDelayExpr(src string) (*delayExpr, error) {
	if len(src) > maxExprLen {
		return nil, fmt.Errorf("retry delay expression is longer than %d characters", maxExprLen)
	}
	p := &exprParser{src: src}
	p.next()
	root, err := p.parseSum(0)
	if err != nil {
		return nil, fmt.Errorf("invalid retry delay expression %q: %w", src, err)
	}
	if p.tok.kind != tokEOF {
		return nil, fmt.Errorf("invalid retry delay expression %q: unexpected %q at offset %d", src, p.tok.text, p.tok.pos)
	}
	return &delayExpr{src: src, root: root}, nil
}

// millis evaluates the expression for the given retry count. NaN, infinities
// and negative results count as 0: a bad formula must not wedge a message.
func (e *delayExpr) millis(retried int) float64 {
	v := e.root.eval(float64(retried))
	if math.IsNaN(v) || v < 0 {
		return 0
	}
	return v
}

type tokKind int

const (
	tokEOF tokKind = iota
	tokNum
	tokIdent
	tokOp // + - * / ( ) ,
)

type token struct {
	kind tokKind
	text string
	num  float64
	pos  int
}

type exprParser struct {
	src string
	pos int
	tok token
	err error
}

func (p *exprParser) next() {
	for p.pos < len(p.src) && (p.src[p.pos] == ' ' || p.src[p.pos] == '\t') {
		p.pos++
	}
	start := p.pos
	if p.pos >= len(p.src) {
		p.tok = token{kind: tokEOF, pos: start}
		return
	}
	c := p.src[p.pos]
	switch {
	case c >= '0' && c <= '9' || c == '.':
		for p.pos < len(p.src) && (p.src[p.pos] >= '0' && p.src[p.pos] <= '9' || p.src[p.pos] == '.') {
			p.pos++
		}
		text := p.src[start:p.pos]
		v, err := strconv.ParseFloat(text, 64)
		if err != nil && p.err == nil {
			p.err = fmt.Errorf("bad number %q at offset %d", text, start)
		}
		p.tok = token{kind: tokNum, text: text, num: v, pos: start}
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_':
		for p.pos < len(p.src) {
			c := p.src[p.pos]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= '0' && c <= '9') {
				break
			}
			p.pos++
		}
		p.tok = token{kind: tokIdent, text: p.src[start:p.pos], pos: start}
	case strings.IndexByte("+-*/(),", c) >= 0:
		p.pos++
		p.tok = token{kind: tokOp, text: string(c), pos: start}
	default:
		p.pos++
		if p.err == nil {
			p.err = fmt.Errorf("unexpected character %q at offset %d", c, start)
		}
		p.tok = token{kind: tokOp, text: string(c), pos: start}
	}
}

func (p *exprParser) isOp(s string) bool { return p.tok.kind == tokOp && p.tok.text == s }

// parseSum: term (('+'|'-') term)*
func (p *exprParser) parseSum(depth int) (exprNode, error) {
	l, err := p.parseProduct(depth)
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") {
		op := p.tok.text[0]
		p.next()
		r, err := p.parseProduct(depth)
		if err != nil {
			return nil, err
		}
		l = binNode{op: op, l: l, r: r}
	}
	return l, nil
}

// parseProduct: unary (('*'|'/') unary)*
func (p *exprParser) parseProduct(depth int) (exprNode, error) {
	l, err := p.parseUnary(depth)
	if err != nil {
		return nil, err
	}
	for p.isOp("*") || p.isOp("/") {
		op := p.tok.text[0]
		p.next()
		r, err := p.parseUnary(depth)
		if err != nil {
			return nil, err
		}
		l = binNode{op: op, l: l, r: r}
	}
	return l, nil
}

// parseUnary: ('-'|'+') unary | primary
func (p *exprParser) parseUnary(depth int) (exprNode, error) {
	if depth > maxExprDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxExprDepth)
	}
	if p.isOp("-") {
		p.next()
		x, err := p.parseUnary(depth + 1)
		if err != nil {
			return nil, err
		}
		return negNode{x}, nil
	}
	if p.isOp("+") {
		p.next()
		return p.parseUnary(depth + 1)
	}
	return p.parsePrimary(depth)
}

// parsePrimary: number | 'retried' | func '(' args ')' | '(' sum ')'
func (p *exprParser) parsePrimary(depth int) (exprNode, error) {
	if p.err != nil {
		return nil, p.err
	}
	t := p.tok
	switch {
	case t.kind == tokNum:
		p.next()
		return numNode(t.num), p.err
	case t.kind == tokIdent && t.text == "retried":
		p.next()
		return varNode{}, p.err
	case t.kind == tokIdent:
		fn, ok := exprFuncs[t.text]
		if !ok {
			return nil, fmt.Errorf("unknown name %q at offset %d (known: retried, pow, sqrt, abs, exp, floor, ceil, round, min, max)", t.text, t.pos)
		}
		p.next()
		if !p.isOp("(") {
			return nil, fmt.Errorf("%s at offset %d must be called: %s(...)", t.text, t.pos, t.text)
		}
		p.next()
		var args []exprNode
		if !p.isOp(")") {
			for {
				a, err := p.parseSum(depth + 1)
				if err != nil {
					return nil, err
				}
				args = append(args, a)
				if !p.isOp(",") {
					break
				}
				p.next()
			}
		}
		if !p.isOp(")") {
			return nil, fmt.Errorf("missing ) after arguments of %s at offset %d", t.text, p.tok.pos)
		}
		p.next()
		if len(args) < fn.minArgs || fn.maxArgs >= 0 && len(args) > fn.maxArgs {
			return nil, fmt.Errorf("%s takes %s, got %d", t.text, arity(fn), len(args))
		}
		return callNode{fn: fn, args: args}, p.err
	case p.isOp("("):
		p.next()
		x, err := p.parseSum(depth + 1)
		if err != nil {
			return nil, err
		}
		if !p.isOp(")") {
			return nil, fmt.Errorf("missing ) at offset %d", p.tok.pos)
		}
		p.next()
		return x, p.err
	case t.kind == tokEOF:
		return nil, fmt.Errorf("unexpected end of expression")
	default:
		return nil, fmt.Errorf("unexpected %q at offset %d", t.text, t.pos)
	}
}

func arity(fn exprFunc) string {
	switch {
	case fn.maxArgs < 0:
		return fmt.Sprintf("at least %d arguments", fn.minArgs)
	case fn.minArgs == 1:
		return "1 argument"
	default:
		return fmt.Sprintf("%d arguments", fn.minArgs)
	}
}
