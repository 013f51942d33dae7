package qstashdev

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
)

// redaction is a parsed Upstash-Redact-Fields: the parts of a message
// QStash must not show. The REST API (messages, DLQ, schedules) shows each
// redacted value as REDACTED:<hex SHA-256 of the value>, as QStash does;
// deliveries and callbacks carry the real values.
type redaction struct {
	body       bool
	allHeaders bool
	headers    []string // canonical names
}

// parseRedaction reads "body", "headers" (or "header", the TypeScript
// SDK's spelling for all headers) and "header[Name]", comma-separated.
func parseRedaction(v string) (redaction, error) {
	var r redaction
	for _, p := range strings.Split(v, ",") {
		switch p = strings.TrimSpace(p); {
		case p == "":
		case strings.EqualFold(p, "body"):
			r.body = true
		case strings.EqualFold(p, "headers"), strings.EqualFold(p, "header"):
			r.allHeaders = true
		case len(p) > len("header[]") && strings.EqualFold(p[:7], "header[") && p[len(p)-1] == ']':
			name := textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(p[7 : len(p)-1]))
			if !slices.Contains(r.headers, name) {
				r.headers = append(r.headers, name)
			}
		default:
			return redaction{}, fmt.Errorf("unknown field %q: use body, headers or header[<name>]", p)
		}
	}
	return r, nil
}

// fields lists r in parseRedaction's grammar, for snapshots.
func (r redaction) fields() []string {
	var out []string
	if r.body {
		out = append(out, "body")
	}
	if r.allHeaders {
		out = append(out, "headers")
	}
	for _, h := range r.headers {
		out = append(out, "header["+h+"]")
	}
	return out
}

func redactionOf(fields []string) redaction {
	r, _ := parseRedaction(strings.Join(fields, ","))
	return r
}

// header returns h with the redacted values replaced; h itself is not
// changed.
func (r redaction) header(h http.Header) http.Header {
	if !r.allHeaders && len(r.headers) == 0 {
		return h
	}
	out := make(http.Header, len(h))
	for k, vs := range h {
		if !r.allHeaders && !slices.Contains(r.headers, textproto.CanonicalMIMEHeaderKey(k)) {
			out[k] = vs
			continue
		}
		red := make([]string, len(vs))
		for i, v := range vs {
			red[i] = redacted([]byte(v))
		}
		out[k] = red
	}
	return out
}

func redacted(b []byte) string {
	sum := sha256.Sum256(b)
	return "REDACTED:" + hex.EncodeToString(sum[:])
}
