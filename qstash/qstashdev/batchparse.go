package qstashdev

import (
	"errors"
	"net/http"
	"net/textproto"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// parseBatchFast decodes the common shape of a /v2/batch body without
// reflection: an array of objects with string fields destination, body and
// queue, and headers mapping names to strings. Batches sit on the relay's
// hot path, and encoding/json spends more time on them than the rest of
// the publish. Anything else (other value types, unknown keys, invalid
// JSON) returns an error, and the caller falls back to encoding/json, which
// accepts every valid input and words the errors.
func parseBatchFast(data []byte) ([]batchItem, error) {
	p := batchParser{data: data, keys: make(map[string]internedKey)}
	p.ws()
	if !p.eat('[') {
		return nil, errFallback
	}
	var items []batchItem
	p.ws()
	if p.eat(']') {
		return p.end(items)
	}
	for {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		items = append(items, it)
		p.ws()
		if p.eat(']') {
			return p.end(items)
		}
		if !p.eat(',') {
			return nil, errFallback
		}
		p.ws()
	}
}

var errFallback = errors.New("not the common batch shape")

type batchParser struct {
	data []byte
	i    int
	// keys interns header names: a batch repeats the same few names in
	// every element.
	keys map[string]internedKey
	seen []string // raw header names of the current object
}

type internedKey struct{ raw, canonical string }

func (p *batchParser) end(items []batchItem) ([]batchItem, error) {
	p.ws()
	if p.i != len(p.data) {
		return nil, errFallback
	}
	return items, nil
}

func (p *batchParser) ws() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *batchParser) eat(c byte) bool {
	if p.i < len(p.data) && p.data[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *batchParser) item() (batchItem, error) {
	var it batchItem
	if !p.eat('{') {
		return it, errFallback
	}
	p.ws()
	if p.eat('}') {
		return it, nil
	}
	for {
		key, ok := p.rawString()
		if !ok {
			return it, errFallback
		}
		p.ws()
		if !p.eat(':') {
			return it, errFallback
		}
		p.ws()
		switch string(key) {
		case "destination":
			s, ok := p.str()
			if !ok {
				return it, errFallback
			}
			it.Destination = s
		case "body":
			s, ok := p.str()
			if !ok {
				return it, errFallback
			}
			it.Body = s
		case "queue":
			s, ok := p.str()
			if !ok {
				return it, errFallback
			}
			it.Queue = s
		case "headers":
			h, ok := p.headers()
			if !ok {
				return it, errFallback
			}
			it.Headers = batchHeaders(h)
		default:
			return it, errFallback
		}
		p.ws()
		if p.eat('}') {
			return it, nil
		}
		if !p.eat(',') {
			return it, errFallback
		}
		p.ws()
	}
}

func (p *batchParser) headers() (http.Header, bool) {
	if !p.eat('{') {
		return nil, false
	}
	h := make(http.Header, 12)
	p.seen = p.seen[:0]
	p.ws()
	if p.eat('}') {
		return h, true
	}
	for {
		raw, ok := p.rawString()
		if !ok {
			return nil, false
		}
		key, ok := p.keys[string(raw)] // no allocation on a hit
		if !ok {
			if !validHeaderKey(raw) {
				return nil, false
			}
			r := string(raw)
			key = internedKey{raw: r, canonical: textproto.CanonicalMIMEHeaderKey(r)}
			p.keys[r] = key
		}
		// A repeated name means "last wins" in JSON but "append" for names
		// differing in case only; leave that subtlety to encoding/json.
		for _, s := range p.seen {
			if s == key.raw {
				return nil, false
			}
		}
		p.seen = append(p.seen, key.raw)
		p.ws()
		if !p.eat(':') {
			return nil, false
		}
		p.ws()
		v, ok := p.str()
		if !ok {
			return nil, false
		}
		h[key.canonical] = append(h[key.canonical], v)
		p.ws()
		if p.eat('}') {
			return h, true
		}
		if !p.eat(',') {
			return nil, false
		}
		p.ws()
	}
}

// validHeaderKey keeps the fast path to plain names; escapes in a key go
// to encoding/json.
func validHeaderKey(b []byte) bool {
	for _, c := range b {
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			return false
		}
	}
	return len(b) > 0
}

// rawString returns a string's bytes without unescaping; only for keys,
// which must then match exactly.
func (p *batchParser) rawString() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.data) {
		switch c := p.data[p.i]; {
		case c == '"':
			p.i++
			return p.data[start : p.i-1], true
		case c == '\\' || c < 0x20:
			return nil, false
		default:
			p.i++
		}
	}
	return nil, false
}

// str decodes a JSON string. Invalid UTF-8 is left to encoding/json, which
// replaces it.
func (p *batchParser) str() (string, bool) {
	if !p.eat('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.data) {
		c := p.data[p.i]
		switch {
		case c == '"':
			s := p.data[start:p.i]
			p.i++
			if !utf8.Valid(s) {
				return "", false
			}
			return string(s), true
		case c == '\\':
			return p.escapedStr(start)
		case c < 0x20:
			return "", false
		default:
			p.i++
		}
	}
	return "", false
}

func (p *batchParser) escapedStr(start int) (string, bool) {
	buf := make([]byte, 0, p.i-start+64)
	buf = append(buf, p.data[start:p.i]...)
	for p.i < len(p.data) {
		c := p.data[p.i]
		switch {
		case c == '"':
			p.i++
			if !utf8.Valid(buf) {
				return "", false
			}
			return string(buf), true
		case c < 0x20:
			return "", false
		case c != '\\':
			buf = append(buf, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.data) {
			return "", false
		}
		e := p.data[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", false
			}
			if utf16.IsSurrogate(r) {
				// A surrogate must pair with a following \uXXXX.
				if p.i+1 < len(p.data) && p.data[p.i] == '\\' && p.data[p.i+1] == 'u' {
					p.i += 2
					r2, ok := p.hex4()
					if !ok {
						return "", false
					}
					r = utf16.DecodeRune(r, r2)
				} else {
					r = utf8.RuneError
				}
				if r == utf8.RuneError {
					return "", false // unpaired: encoding/json's replacement rules apply
				}
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", false
		}
	}
	return "", false
}

func (p *batchParser) hex4() (rune, bool) {
	if p.i+4 > len(p.data) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(p.data[p.i:p.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(n), true
}
