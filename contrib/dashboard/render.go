package dashboard

import (
	"bytes"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// page is what the layout renders around a page's content.
type page struct {
	Title    string
	Base     string
	Nav      string
	Who      string
	LoggedIn bool // a token session: offer to log out
	CSRF     string
	ReadOnly bool
	Data     any
}

var pageNames = []string{"overview", "events", "event", "deadletters", "group", "confirm", "login", "error"}

func (h *handler) parseTemplates() error {
	funcs := template.FuncMap{
		"when":     fmtTime,
		"ago":      ago,
		"agoSince": func(t time.Time) string { return ago(time.Since(t).Seconds()) },
		"num":      num,
		"ms":       fmtMS,
		"inc":      func(i int) int { return i + 1 },
		// qs builds a query string from pairs. It is typed as a URL
		// because url.Values.Encode already escaped every value.
		"qs": func(kv ...any) template.URL {
			q := url.Values{}
			for i := 0; i+1 < len(kv); i += 2 {
				q.Set(fmt.Sprint(kv[i]), fmt.Sprint(kv[i+1]))
			}
			return template.URL(q.Encode())
		},
		"defaultDest": func() string { return defaultDestination },
	}
	h.pages = map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return fmt.Errorf("outboxkit/dashboard: template %s: %w", name, err)
		}
		h.pages[name] = t
	}
	return nil
}

// render writes a page, buffered so a template error becomes a 500
// instead of half a page.
func (h *handler) render(w http.ResponseWriter, r *http.Request, name, title string, data any) {
	h.renderStatus(w, r, http.StatusOK, name, title, data)
}

func (h *handler) renderStatus(w http.ResponseWriter, r *http.Request, code int, name, title string, data any) {
	who := whoFrom(r.Context())
	p := page{Title: title, Base: h.cfg.BasePath, Nav: name, Who: who, ReadOnly: h.cfg.ReadOnly, Data: data,
		LoggedIn: who == "token session"}
	if p.LoggedIn {
		p.CSRF = h.csrf.token(w, r)
	}
	var buf bytes.Buffer
	if err := h.pages[name].Execute(&buf, p); err != nil {
		h.log.Error("dashboard template", "page", name, "err", err)
		http.Error(w, "The page could not be rendered; the dashboard's log says why.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

func (h *handler) errorPage(w http.ResponseWriter, r *http.Request, code int, msg string) {
	h.renderStatus(w, r, code, "error", http.StatusText(code), msg)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000") + " UTC"
}

// ago says a duration in seconds the way people read it.
func ago(s float64) string {
	switch {
	case s <= 0:
		return "0 s"
	case s < 1:
		return fmt.Sprintf("%.0f ms", s*1000)
	case s < 120:
		return fmt.Sprintf("%.0f s", s)
	case s < 7200:
		return fmt.Sprintf("%.0f min", s/60)
	case s < 172800:
		return fmt.Sprintf("%.1f h", s/3600)
	}
	return fmt.Sprintf("%.1f days", s/86400)
}

// num groups thousands: 1,234,567.
func num(v any) string {
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int64:
		n = x
	default:
		return fmt.Sprint(v)
	}
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func fmtMS(v *float64) string {
	if v == nil || math.IsNaN(*v) {
		return "–"
	}
	if *v >= 10000 {
		return ago(*v / 1000)
	}
	return strconv.FormatFloat(*v, 'f', -1, 64) + " ms"
}
