package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
)

// csrfCookie holds a browser's random CSRF secret; forms carry an HMAC of
// it, which a page of another site can neither read nor compute.
const csrfCookie = "outboxkit_dashboard_csrf"

// csrfField is the form field carrying the token.
const csrfField = "csrf"

// csrfGuard protects every change twice: net/http's cross-origin
// protection refuses requests a browser marks as coming from another
// origin (Sec-Fetch-Site, Origin), and the form must carry the token
// derived from the browser's own cookie (for browsers that send neither
// header).
type csrfGuard struct {
	key      []byte // per process: a restart invalidates open forms
	path     string
	crossOri *http.CrossOriginProtection
}

func newCSRFGuard(key []byte, basePath string) *csrfGuard {
	return &csrfGuard{key: key, path: cookiePath(basePath), crossOri: http.NewCrossOriginProtection()}
}

// token returns the form token for r, setting the CSRF cookie on w when
// the browser has none yet.
func (g *csrfGuard) token(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && validSecret(c.Value) {
		return g.sign(c.Value)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	v := hex.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{
		Name: csrfCookie, Value: v, Path: g.path,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	// The request carries the new cookie too, so a second token() for
	// the same response agrees.
	r.AddCookie(&http.Cookie{Name: csrfCookie, Value: v})
	return g.sign(v)
}

func (g *csrfGuard) sign(secret string) string {
	m := hmac.New(sha256.New, g.key)
	m.Write([]byte(secret))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func validSecret(v string) bool {
	b, err := hex.DecodeString(v)
	return err == nil && len(b) == 32
}

var (
	errCrossOrigin = errors.New("the request came from a page of another site")
	errNoCSRF      = errors.New("the form's CSRF token is missing or does not match this browser's")
)

// check refuses a change that did not come from one of the dashboard's
// own pages.
func (g *csrfGuard) check(r *http.Request) error {
	if err := g.crossOri.Check(r); err != nil {
		return errCrossOrigin
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || !validSecret(c.Value) {
		return errNoCSRF
	}
	if !hmac.Equal([]byte(r.PostFormValue(csrfField)), []byte(g.sign(c.Value))) {
		return errNoCSRF
	}
	return nil
}
