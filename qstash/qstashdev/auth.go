package qstashdev

import (
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"
)

// tokenParam is the query parameter that may carry the API token.
const tokenParam = "qstash_token"

// authorized checks the request's token: the Authorization header if
// present, else the query parameter.
func (s *Server) authorized(r *http.Request) bool {
	tok := ""
	if h := r.Header.Get("Authorization"); h != "" {
		if t, ok := strings.CutPrefix(h, "Bearer "); ok {
			tok = strings.TrimSpace(t)
		}
	} else {
		tok = queryToken(r.URL.RawQuery)
	}
	return tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.Token)) == 1
}

// queryToken is the first qstash_token value in a raw query, read the way
// url.ParseQuery reads it (keys and values unescaped, so "qstash%5Ftoken"
// counts; a pair holding ';' or a bad escape is skipped). stripToken must
// remove every pair this can return, and more: the two are kept side by
// side so they cannot drift apart.
func queryToken(raw string) string {
	for _, p := range strings.Split(raw, "&") {
		if strings.Contains(p, ";") {
			continue // url.ParseQuery refuses the pair
		}
		k, v, _ := strings.Cut(p, "=")
		if key, err := url.QueryUnescape(k); err != nil || key != tokenParam {
			continue
		}
		if val, err := url.QueryUnescape(v); err == nil && val != "" {
			return val
		}
	}
	return ""
}

// stripToken removes every qstash_token parameter from a raw query, in any
// spelling: the query of a publish is the destination's own, and a token
// left in it would reach the destination, its logs, the signature's sub
// claim, events and the DLQ. Keys are compared unescaped, and ';' counts
// as a separator too, because some destination frameworks split on it
// (url.ParseQuery does not, so such a pair never authenticates; it is
// removed all the same). What is kept stays as sent: re-encoding would
// change the destination URL.
func stripToken(raw string) string {
	if !strings.Contains(raw, tokenParam) && !strings.Contains(raw, "%") {
		return raw
	}
	var b strings.Builder
	wrote := false
	sep := byte('&') // the separator before raw[start:]
	start := 0
	for i := 0; i <= len(raw); i++ {
		if i < len(raw) && raw[i] != '&' && raw[i] != ';' {
			continue
		}
		p := raw[start:i]
		if !isTokenPair(p) {
			if wrote {
				b.WriteByte(sep)
			}
			b.WriteString(p)
			wrote = true
		}
		if i < len(raw) {
			sep = raw[i]
		}
		start = i + 1
	}
	return b.String()
}

// isTokenPair reports whether a raw "key=value" pair's key, unescaped, is
// qstash_token.
func isTokenPair(p string) bool {
	k, _, _ := strings.Cut(p, "=")
	if key, err := url.QueryUnescape(k); err == nil {
		k = key
	}
	return k == tokenParam
}
