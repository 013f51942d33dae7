package dashboard

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// eventRow is one row of the events list.
type eventRow struct {
	ID            string
	Type          string
	State         string
	Aggregate     string
	Destination   string
	Attempts      int
	CreatedAt     time.Time
	AvailableAt   time.Time
	PublishedAt   time.Time
	DeadAt        time.Time
	LeaseUntil    time.Time
	LastError     string
	key           []string
	hit, boundary bool
}

// Created is the row's creation time as the event page's created
// parameter takes it: with the ID, it names one row on the partitioned
// layout, where an ID may be held by rows in two partitions.
func (e eventRow) Created() string { return e.CreatedAt.UTC().Format(time.RFC3339Nano) }

// eventsData is the events page.
type eventsData struct {
	Target  *target
	Targets []*target
	Views   []view
	Form    eventsForm
	Rows    []eventRow
	// Next is the query string of the next page ("" at the end);
	// Truncated says the walk stopped at ScanLimit rows before it found a
	// page of matches (Next then searches on).
	Next      template.URL
	Truncated bool
	ScanLimit int
	Error     string
	// First says this is the first page.
	First bool
}

// eventsForm is the filter as typed.
type eventsForm struct {
	State, Type, Aggregate, Destination, Since, Until string
}

func (f eventsForm) query(t int) url.Values {
	q := url.Values{"t": {strconv.Itoa(t)}}
	for k, v := range map[string]string{"state": f.State, "type": f.Type, "aggregate": f.Aggregate, "destination": f.Destination, "since": f.Since, "until": f.Until} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// Query is the filter as a query string, for the first page's link.
func (f eventsForm) Query(t int) template.URL { return template.URL(f.query(t).Encode()) }

// formTime is the datetime-local input's format; values are UTC.
const formTime = "2006-01-02T15:04"

func parseFormTime(name, s string) (any, error) {
	if s == "" {
		return nil, nil
	}
	for _, layout := range []string{formTime, "2006-01-02T15:04:05", time.RFC3339Nano} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return nil, fmt.Errorf("%s %q is not a time: use YYYY-MM-DDTHH:MM (UTC) or RFC 3339", name, s)
}

// cursor is a page's resume point: the view's key of the last row seen.
type cursor struct {
	View string   `json:"v"`
	Key  []string `json:"k"`
}

func encodeCursor(v string, key []string) string {
	b, _ := json.Marshal(cursor{View: v, Key: key})
	return base64.RawURLEncoding.EncodeToString(b)
}

var errBadCursor = errors.New("the page link is damaged or belongs to another state: start again from the first page")

func decodeCursor(v view, s string) ([]any, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, errBadCursor
	}
	var c cursor
	if json.Unmarshal(b, &c) != nil || c.View != v.Name || len(c.Key) != len(v.keys) {
		return nil, errBadCursor
	}
	out := make([]any, len(c.Key))
	for i, col := range v.keys {
		switch col {
		case "id":
			id, err := core.ParseID(c.Key[i])
			if err != nil {
				return nil, errBadCursor
			}
			out[i] = id.String()
		case "pos":
			n, err := strconv.ParseInt(c.Key[i], 10, 64)
			if err != nil {
				return nil, errBadCursor
			}
			out[i] = n
		default:
			t, err := time.Parse(time.RFC3339Nano, c.Key[i])
			if err != nil {
				return nil, errBadCursor
			}
			out[i] = t
		}
	}
	return out, nil
}

// parseFilter reads the filter fields.
func parseFilter(f eventsForm) (view, eventFilter, any, any, error) {
	state := f.State
	if state == "" {
		state = "all"
	}
	v, ok := findView(state)
	if !ok {
		return view{}, eventFilter{}, nil, nil, fmt.Errorf("state %q is unknown: pick all, pending, leased, published or dead", state)
	}
	var ef eventFilter
	for _, t := range strings.Split(f.Type, ",") {
		if t = strings.TrimSpace(t); t != "" {
			ef.Types = append(ef.Types, t)
		}
	}
	if a := strings.TrimSpace(f.Aggregate); a != "" {
		typ, id, found := strings.Cut(a, "/")
		if !found {
			typ, id = "", a
		}
		ef.AggregateType, ef.AggregateID = typ, id
	}
	if d := strings.TrimSpace(f.Destination); d != "" {
		if d == defaultDestination {
			d = ""
		}
		ef.Destination = &d
	}
	since, err := parseFormTime("since", f.Since)
	if err != nil {
		return view{}, eventFilter{}, nil, nil, err
	}
	until, err := parseFormTime("until", f.Until)
	if err != nil {
		return view{}, eventFilter{}, nil, nil, err
	}
	return v, ef, since, until, nil
}

func (h *handler) eventsPage(w http.ResponseWriter, r *http.Request) {
	t, ok := h.targetFor(r)
	if !ok {
		h.errorPage(w, r, http.StatusNotFound, "No such table.")
		return
	}
	q := r.URL.Query()
	d := eventsData{Target: t, Targets: h.targets, Views: views, ScanLimit: h.cfg.ScanLimit,
		Form:  eventsForm{State: q.Get("state"), Type: q.Get("type"), Aggregate: q.Get("aggregate"), Destination: q.Get("destination"), Since: q.Get("since"), Until: q.Get("until")},
		First: q.Get("after") == ""}
	rows, next, truncated, err := h.listEvents(r, t, d.Form, q.Get("after"))
	if err != nil {
		d.Error = err.Error()
		h.render(w, r, "events", "Events", d)
		return
	}
	d.Rows, d.Truncated = rows, truncated
	if next != "" {
		nq := d.Form.query(t.idx)
		nq.Set("after", next)
		d.Next = template.URL(nq.Encode()) // escaped by Encode
	}
	h.render(w, r, "events", "Events", d)
}

// listEvents runs one page's statement.
func (h *handler) listEvents(r *http.Request, t *target, f eventsForm, after string) (rows []eventRow, next string, truncated bool, err error) {
	v, ef, since, until, err := parseFilter(f)
	if err != nil {
		return nil, "", false, err
	}
	var cur []any
	if after != "" {
		if cur, err = decodeCursor(v, after); err != nil {
			return nil, "", false, err
		}
	}
	var pruneFrom, pruneTo *time.Time
	if since != nil || until != nil {
		// A time filter on the partitioned layout reads only the
		// partitions that may hold its rows.
		partitioned, parts, err := readPartitions(r.Context(), t.Pool, t.n)
		if err != nil {
			h.log.Error("dashboard events", "table", t.Label(), "err", redactText(err.Error()))
			return nil, "", false, fmt.Errorf("reading the table's partitions failed: %s", redactText(err.Error()))
		}
		if partitioned {
			pruneFrom, pruneTo = pruneRange(parts, timePtr(since), timePtr(until))
		}
	}
	lq := buildList(t.n, v, ef, cur, h.cfg.ScanLimit, h.cfg.PageSize, since, until, pruneFrom, pruneTo)
	dbRows, err := t.Pool.Query(r.Context(), lq.sql, lq.args...)
	if err != nil {
		h.log.Error("dashboard events", "table", t.Label(), "err", redactText(err.Error()))
		return nil, "", false, fmt.Errorf("reading the events failed: %s", redactText(err.Error()))
	}
	defer dbRows.Close()
	var all []eventRow
	for dbRows.Next() {
		var (
			e                      eventRow
			id                     pgtype.UUID
			aggType, aggID         string
			published, dead, lease pgtype.Timestamptz
			lastError              pgtype.Text
			pos                    int64
			now                    time.Time
		)
		if err := dbRows.Scan(&id, &e.Type, &aggType, &aggID, &e.Destination, &e.Attempts, &e.CreatedAt, &e.AvailableAt,
			&published, &dead, &lease, &lastError, &pos, &e.hit, &e.boundary, &now); err != nil {
			return nil, "", false, fmt.Errorf("reading the events failed: %s", redactText(err.Error()))
		}
		e.ID = core.ID(id.Bytes).String()
		e.Aggregate = aggregateLabel(aggType, aggID)
		e.PublishedAt, e.DeadAt, e.LeaseUntil = published.Time, dead.Time, lease.Time
		e.State = stateOf(published.Valid, dead.Valid, lease.Valid && lease.Time.After(now))
		e.Destination = redactText(e.Destination)
		e.LastError = redactText(oneLine(lastError.String))
		for _, col := range v.keys {
			switch col {
			case "id":
				e.key = append(e.key, e.ID)
			case "pos":
				e.key = append(e.key, strconv.FormatInt(pos, 10))
			case "available_at":
				e.key = append(e.key, e.AvailableAt.Format(time.RFC3339Nano))
			case "published_at":
				e.key = append(e.key, e.PublishedAt.Format(time.RFC3339Nano))
			}
		}
		all = append(all, e)
	}
	if err := dbRows.Err(); err != nil {
		return nil, "", false, fmt.Errorf("reading the events failed: %s", redactText(err.Error()))
	}
	page := h.cfg.PageSize
	var boundary *eventRow
	for i := range all {
		if all[i].hit {
			rows = append(rows, all[i])
		}
		if all[i].boundary {
			boundary = &all[i]
		}
	}
	switch {
	case len(rows) > page:
		rows = rows[:page]
		next = encodeCursor(v.Name, rows[page-1].key)
	case boundary != nil:
		// The walk reached ScanLimit rows: search on from there.
		next, truncated = encodeCursor(v.Name, boundary.key), true
	}
	return rows, next, truncated, nil
}

func stateOf(published, dead, leased bool) string {
	switch {
	case published:
		return string(postgres.StatePublished)
	case dead:
		return string(postgres.StateDeadLettered)
	case leased:
		return string(postgres.StateLeased)
	}
	return string(postgres.StatePending)
}

func aggregateLabel(typ, id string) string {
	if typ == "" && id == "" {
		return ""
	}
	return typ + "/" + id
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// eventData is one event's page.
type eventData struct {
	Target   *target
	Rec      postgres.Record
	State    string
	Headers  []headerRow
	Payload  string
	TraceURL string
	TraceID  string
	LastErr  string
	Dest     string
	Live     bool // the lease is live
	CSRF     string
	ReadOnly bool
	// Copies are the rows holding the ID when there are several (the
	// partitioned layout's IDs are unique per partition only).
	Copies []eventCopy
}

// traceparent is W3C trace context: version-traceid-spanid-flags.
var traceparent = regexp.MustCompile(`^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$`)

func (h *handler) eventPage(w http.ResponseWriter, r *http.Request) {
	t, ok := h.targetFor(r)
	if !ok {
		h.errorPage(w, r, http.StatusNotFound, "No such table.")
		return
	}
	id, err := core.ParseID(strings.TrimSpace(r.URL.Query().Get("id")))
	if err != nil {
		h.errorPage(w, r, http.StatusBadRequest, "That is not an event ID (a UUID such as 0190f1a2-7b3c-7d4e-8f90-a1b2c3d4e5f6).")
		return
	}
	copies, err := readCopies(r.Context(), t, id)
	if err != nil {
		h.log.Error("dashboard event", "table", t.Label(), "err", redactText(err.Error()))
		h.errorPage(w, r, http.StatusBadGateway, "Reading the event failed: "+redactText(err.Error()))
		return
	}
	var rec postgres.Record
	switch len(copies) {
	case 0:
		err = postgres.ErrNotFound
	case 1:
		rec, err = t.store.Get(r.Context(), id)
	default:
		// One ID in several partitions: show one row, never a mix.
		shown := 0
		for i, c := range copies {
			if c.Created() == r.URL.Query().Get("created") {
				shown = i
			}
		}
		copies[shown].Shown = true
		rec, err = readCopy(r.Context(), t, id, copies[shown].CreatedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			err = postgres.ErrNotFound
		}
	}
	if errors.Is(err, postgres.ErrNotFound) {
		h.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("No event %s in %s.", id, t.Label()))
		return
	}
	if err != nil {
		h.log.Error("dashboard event", "table", t.Label(), "err", redactText(err.Error()))
		h.errorPage(w, r, http.StatusBadGateway, "Reading the event failed: "+redactText(err.Error()))
		return
	}
	d := eventData{Target: t, Rec: rec, State: string(rec.State), LastErr: redactText(rec.LastError), Dest: redactText(rec.Destination),
		Live: rec.State == postgres.StateLeased, ReadOnly: h.cfg.ReadOnly}
	if len(copies) > 1 {
		d.Copies = copies
	}
	for _, k := range slices.Sorted(maps.Keys(rec.Headers)) {
		v := rec.Headers[k]
		if h.redact.MatchString(k) {
			d.Headers = append(d.Headers, headerRow{Name: k, Value: redacted, Redacted: true})
			continue
		}
		d.Headers = append(d.Headers, headerRow{Name: k, Value: redactText(v)})
		if strings.EqualFold(k, "traceparent") {
			if m := traceparent.FindStringSubmatch(strings.TrimSpace(strings.ToLower(v))); m != nil && m[1] != strings.Repeat("0", 32) {
				d.TraceID = m[1]
				if h.cfg.TraceURL != "" {
					d.TraceURL = strings.ReplaceAll(h.cfg.TraceURL, traceIDPlaceholder, m[1])
				}
			}
		}
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, rec.Payload, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(rec.Payload)
	}
	d.Payload = pretty.String()
	d.CSRF = h.csrf.token(w, r)
	h.render(w, r, "event", "Event "+id.String(), d)
}

// timePtr is a parsed form time (nil or a time.Time) as a pointer.
func timePtr(v any) *time.Time {
	if t, ok := v.(time.Time); ok {
		return &t
	}
	return nil
}
