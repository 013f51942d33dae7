package redact

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Mask is what replaces a credential.
const Mask = "***"

// MinSecretLen is the shortest known secret String replaces wherever it
// appears: a one- or two-letter password would erase those letters from
// every message. The patterns still remove short ones from URLs and
// connection strings.
const MinSecretLen = 3

// String returns s with its credentials replaced by Mask: first each of
// secrets (longest first, so one containing another goes whole), then the
// userinfo of every URL, keyword/value passwords, password and token query
// parameters, and bearer tokens.
func String(s string, secrets ...string) string {
	if len(secrets) > 0 {
		secrets = slices.Clone(secrets)
		slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
		for _, sec := range secrets {
			if len(sec) >= MinSecretLen {
				s = strings.ReplaceAll(s, sec, Mask)
			}
		}
	}
	s = userinfos(s)
	s = queryRE.ReplaceAllString(s, "${1}"+Mask)
	s = keywordRE.ReplaceAllString(s, "${1}"+Mask)
	return bearerRE.ReplaceAllString(s, "${1}"+Mask)
}

var (
	// schemeRE finds where URLs start.
	schemeRE = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*)://`)
	// queryRE finds credential query parameters; a value ends at the next
	// parameter, fragment or space.
	queryRE = regexp.MustCompile(`(?i)([?&][\w.-]*(?:password|passwd|token|secret)[\w.-]*=)[^&#\s]*`)
	// keywordRE finds keyword/value passwords (password=x, sslpassword='a
	// b', PGPASSWORD=x). libpq ends a quoted value at an unescaped quote
	// and an unquoted one at unescaped space; backslash escapes either. An
	// unterminated quote runs to the end. A keyword must start the text
	// or follow a space or punctuation, so query parameters (handled
	// above) are not matched again.
	keywordRE = regexp.MustCompile(`(?i)((?:^|[\s,;(\[{"])\w*(?:password|passwd)\s*=\s*)('(?:[^'\\]|\\.)*'?|(?:\\.|[^\s\\])+)`)
	// bearerRE finds Authorization header values.
	bearerRE = regexp.MustCompile(`(?i)(\bbearer\s+)[^\s"',;]+`)
)

// userinfos masks the userinfo of every URL in s. A URL's userinfo is
// taken to end at the last "@" before the next URL (or the end of s): a
// password with an unescaped "@", "/" or space cannot be delimited any
// better, and stopping at the first would print the rest of it.
func userinfos(s string) string {
	locs := schemeRE.FindAllStringSubmatchIndex(s, -1)
	if locs == nil {
		return s
	}
	var b strings.Builder
	last := 0
	for i, loc := range locs {
		start := loc[1]
		if start < last {
			continue // inside the userinfo already masked
		}
		end := len(s)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		at := strings.LastIndexByte(s[start:end], '@')
		if at < 0 {
			continue
		}
		b.WriteString(s[last:start])
		b.WriteString(maskUserinfo(strings.ToLower(s[loc[2]:loc[3]]), s[start:start+at]))
		last = start + at
	}
	b.WriteString(s[last:])
	return b.String()
}

// maskUserinfo returns what replaces the userinfo u of a URL with the given
// scheme. A well-formed "user:password" keeps its user, which tells an
// operator which role failed; anything a URL cannot hold goes whole. A
// user alone is a role name in PostgreSQL URLs, and in others (NATS, HTTP)
// usually a token.
func maskUserinfo(scheme, u string) string {
	switch {
	case u == "":
		return u
	case !wellFormedUserinfo(u):
		return Mask
	}
	if user, _, ok := strings.Cut(u, ":"); ok {
		return user + ":" + Mask
	}
	if scheme == "postgres" || scheme == "postgresql" {
		return u
	}
	return Mask
}

// wellFormedUserinfo reports whether u has only the characters RFC 3986
// allows in a URL's userinfo; a Mask already there is one ("*" is a
// sub-delimiter).
func wellFormedUserinfo(u string) bool {
	for i := 0; i < len(u); i++ {
		c := u[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~!$&'()*+,;=:%", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// Secrets returns the credentials in conn, a URL or a keyword/value
// connection string the caller was given, in each form a message may quote
// them: as written, percent-decoded and percent-encoded. Pass them to
// String, which then removes them even from text that mangles the URL
// around them (a driver's half-redacted echo of a string it could not
// parse). A URL's password is everything between the first ":" of its
// userinfo and the last "@"; a userinfo a URL cannot hold counts whole; a
// URL user without a password counts as a token, except in PostgreSQL
// URLs.
func Secrets(conn string) []string {
	var out []string
	var add func(string)
	add = func(s string) {
		// As written, and escaped as a URL's userinfo, path and query
		// would escape it.
		userinfo := strings.TrimPrefix(url.UserPassword("", s).String(), ":")
		for _, v := range []string{s, userinfo, url.PathEscape(s), url.QueryEscape(s)} {
			if v != "" && !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
		if d, err := url.PathUnescape(s); err == nil && d != s {
			add(d)
		}
	}
	if m := schemeRE.FindStringSubmatchIndex(conn); m != nil && m[0] == 0 {
		rest := conn[m[1]:]
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			user, pw, ok := strings.Cut(rest[:at], ":")
			scheme := strings.ToLower(conn[m[2]:m[3]])
			switch {
			case !wellFormedUserinfo(rest[:at]):
				// No one can say where the user ends: all of it.
				add(rest[:at])
				if ok {
					add(pw)
				}
			case ok:
				add(pw)
			case scheme != "postgres" && scheme != "postgresql":
				add(user)
			}
		}
		// A parsable URL's own view, in case it differs (Go's parser ends
		// the authority at the first "/").
		if u, err := url.Parse(conn); err == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok {
				add(pw)
			}
		}
	}
	for _, m := range keywordRE.FindAllStringSubmatch(conn, -1) {
		v := m[2]
		add(v)
		if strings.HasPrefix(v, "'") {
			v = strings.TrimSuffix(strings.TrimPrefix(v, "'"), "'")
			add(v)
		}
		add(unescapeKeyword(v))
	}
	for _, m := range queryRE.FindAllStringSubmatchIndex(conn, -1) {
		if v, err := url.QueryUnescape(conn[m[3]:m[1]]); err == nil {
			add(v)
		}
		add(conn[m[3]:m[1]])
	}
	return out
}

// unescapeKeyword undoes libpq's backslash escapes ("it\'s" is "it's").
func unescapeKeyword(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}
