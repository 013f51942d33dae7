package dashboard

import (
	"net/http"
	"strings"
	"time"
)

type loginData struct {
	Next   string
	Failed bool
	NoForm bool // no token configured: nothing to log in with here
	CSRF   string
}

// safeNext keeps a post-login redirect on the dashboard itself.
func (h *handler) safeNext(next string) string {
	base := h.cfg.BasePath
	if next == "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return base + "/"
	}
	if base != "" && !strings.HasPrefix(next, base+"/") {
		return base + "/"
	}
	return next
}

func (h *handler) loginPage(w http.ResponseWriter, r *http.Request) {
	d := loginData{Next: h.safeNext(r.URL.Query().Get("next")), NoForm: h.cfg.Auth.Token == "", CSRF: h.csrf.token(w, r)}
	h.renderStatus(w, r, http.StatusUnauthorized, "login", "Log in", d)
}

func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	next := h.safeNext(r.PostFormValue("next"))
	if h.cfg.Auth.Token == "" || !equal(r.PostFormValue("token"), h.cfg.Auth.Token) {
		h.log.Warn("dashboard login refused", "remote", r.RemoteAddr)
		d := loginData{Next: next, Failed: true, NoForm: h.cfg.Auth.Token == "", CSRF: h.csrf.token(w, r)}
		h.renderStatus(w, r, http.StatusUnauthorized, "login", "Log in", d)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: h.auth.newSession(time.Now()), Path: cookiePath(h.cfg.BasePath),
		MaxAge: int(sessionLifetime.Seconds()), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	h.log.Info("dashboard login", "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: cookiePath(h.cfg.BasePath), MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, h.cfg.BasePath+"/login", http.StatusSeeOther)
}
