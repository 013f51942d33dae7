package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outboxkit/core"
)

// deadLetter is one dead letter as grouping reads it.
type deadLetter struct {
	ID          string
	Type        string
	Destination string
	Error       string // redacted, one line
	Group       string // normalised error
	DeadAt      time.Time
}

// dlGroup is dead letters of one type failing with one normalised error.
type dlGroup struct {
	Key          string
	Type         string
	Error        string
	Count        int
	FirstDead    time.Time
	LastDead     time.Time
	Destinations []string
	Sample       string // one member's full (redacted) error
	members      []string
}

// readDeadLetters groups the most recent DeadLetterLimit dead letters of t.
func (h *handler) readDeadLetters(ctx context.Context, t *target) (groups []*dlGroup, scanned int, total int64, err error) {
	rows, err := t.Pool.Query(ctx, deadLettersSQL(t.n), h.cfg.DeadLetterLimit)
	if err != nil {
		return nil, 0, 0, err
	}
	byKey := map[string]*dlGroup{}
	for rows.Next() {
		var (
			id       pgtype.UUID
			typ, dst string
			lastErr  string
			deadAt   time.Time
		)
		if err := rows.Scan(&id, &typ, &dst, &lastErr, &deadAt); err != nil {
			rows.Close()
			return nil, 0, 0, err
		}
		scanned++
		norm := normaliseError(lastErr)
		k := groupKey(typ, norm)
		g := byKey[k]
		if g == nil {
			g = &dlGroup{Key: k, Type: typ, Error: norm, FirstDead: deadAt, LastDead: deadAt, Sample: redactText(oneLine(lastErr))}
			byKey[k] = g
		}
		g.Count++
		g.members = append(g.members, core.ID(id.Bytes).String())
		if deadAt.Before(g.FirstDead) {
			g.FirstDead = deadAt
		}
		if deadAt.After(g.LastDead) {
			g.LastDead = deadAt
		}
		if dst == "" {
			dst = defaultDestination
		}
		if !slices.Contains(g.Destinations, dst) && len(g.Destinations) < 5 {
			g.Destinations = append(g.Destinations, redactText(dst))
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, 0, err
	}
	total = int64(scanned)
	if scanned >= h.cfg.DeadLetterLimit {
		if err := t.Pool.QueryRow(ctx, `SELECT count(*) FROM `+t.n.outbox+` WHERE dead_at IS NOT NULL`).Scan(&total); err != nil {
			return nil, 0, 0, err
		}
	}
	for _, g := range byKey {
		groups = append(groups, g)
	}
	slices.SortFunc(groups, func(a, b *dlGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), b.LastDead.Compare(a.LastDead), cmp.Compare(a.Key, b.Key))
	})
	return groups, scanned, total, nil
}

type deadLettersData struct {
	Target   *target
	Targets  []*target
	Groups   []*dlGroup
	Scanned  int
	Total    int64
	Limited  bool
	Done     string
	DoneN    int64
	Error    string
	ReadOnly bool
	CSRF     string
}

func (h *handler) deadLettersPage(w http.ResponseWriter, r *http.Request) {
	t, ok := h.targetFor(r)
	if !ok {
		h.errorPage(w, r, http.StatusNotFound, "No such table.")
		return
	}
	d := deadLettersData{Target: t, Targets: h.targets, ReadOnly: h.cfg.ReadOnly, CSRF: h.csrf.token(w, r)}
	q := r.URL.Query()
	if done := q.Get("done"); done == "replay" || done == "purge" {
		d.Done = done
		d.DoneN, _ = strconv.ParseInt(q.Get("n"), 10, 64)
	}
	groups, scanned, total, err := h.readDeadLetters(r.Context(), t)
	if err != nil {
		h.log.Error("dashboard dead letters", "table", t.Label(), "err", redactText(err.Error()))
		d.Error = "Reading the dead letters failed: " + redactText(err.Error())
	}
	d.Groups, d.Scanned, d.Total, d.Limited = groups, scanned, total, int64(scanned) < total
	h.render(w, r, "deadletters", "Dead letters", d)
}

// groupMembersShown bounds the member list of a group's page.
const groupMembersShown = 500

type groupData struct {
	Target   *target
	Group    *dlGroup
	Members  []deadLetter
	More     int
	ReadOnly bool
	CSRF     string
}

func (h *handler) findGroup(ctx context.Context, t *target, key string) (*dlGroup, error) {
	groups, _, _, err := h.readDeadLetters(ctx, t)
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		if g.Key == key {
			return g, nil
		}
	}
	return nil, nil
}

func (h *handler) groupPage(w http.ResponseWriter, r *http.Request) {
	t, ok := h.targetFor(r)
	if !ok {
		h.errorPage(w, r, http.StatusNotFound, "No such table.")
		return
	}
	g, err := h.findGroup(r.Context(), t, r.URL.Query().Get("g"))
	if err != nil {
		h.errorPage(w, r, http.StatusBadGateway, "Reading the dead letters failed: "+redactText(err.Error()))
		return
	}
	if g == nil {
		h.errorPage(w, r, http.StatusNotFound, "That group has no dead letters any more (replayed or purged meanwhile).")
		return
	}
	d := groupData{Target: t, Group: g, ReadOnly: h.cfg.ReadOnly, CSRF: h.csrf.token(w, r)}
	ids := g.members
	if len(ids) > groupMembersShown {
		d.More = len(ids) - groupMembersShown
		ids = ids[:groupMembersShown]
	}
	recs, err := h.deadByIDs(r.Context(), t, ids)
	if err != nil {
		h.errorPage(w, r, http.StatusBadGateway, "Reading the dead letters failed: "+redactText(err.Error()))
		return
	}
	d.Members = recs
	h.render(w, r, "group", "Dead letters: "+g.Type, d)
}

// deadByIDs reads the listed dead letters (by primary key), newest first.
func (h *handler) deadByIDs(ctx context.Context, t *target, ids []string) ([]deadLetter, error) {
	rows, err := t.Pool.Query(ctx, `SELECT id, event_type, destination, COALESCE(last_error, ''), dead_at FROM `+t.n.outbox+`
WHERE id = ANY($1::uuid[]) AND dead_at IS NOT NULL ORDER BY id DESC`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []deadLetter
	for rows.Next() {
		var (
			d  deadLetter
			id pgtype.UUID
		)
		if err := rows.Scan(&id, &d.Type, &d.Destination, &d.Error, &d.DeadAt); err != nil {
			return nil, err
		}
		d.ID = core.ID(id.Bytes).String()
		d.Group = normaliseError(d.Error)
		d.Error = redactText(oneLine(d.Error))
		d.Destination = redactText(d.Destination)
		out = append(out, d)
	}
	return out, rows.Err()
}

// action is a replay or purge as the confirmation and apply forms carry
// it.
type action struct {
	Verb  string // replay or purge
	Scope string // group or selection
	Group string
	IDs   []string
}

func parseAction(r *http.Request) (action, error) {
	if err := r.ParseForm(); err != nil {
		return action{}, err
	}
	a := action{Verb: r.PostForm.Get("action"), Scope: r.PostForm.Get("scope"), Group: r.PostForm.Get("g")}
	if a.Verb != "replay" && a.Verb != "purge" {
		return action{}, fmt.Errorf("action %q: use replay or purge", a.Verb)
	}
	for _, v := range r.PostForm["id"] {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			id, err := core.ParseID(p)
			if err != nil {
				return action{}, fmt.Errorf("%q is not an event ID", p)
			}
			a.IDs = append(a.IDs, id.String())
		}
	}
	slices.Sort(a.IDs)
	a.IDs = slices.Compact(a.IDs)
	if len(a.IDs) > maxActionIDs {
		return action{}, fmt.Errorf("%d events at once: act on at most %d", len(a.IDs), maxActionIDs)
	}
	switch a.Scope {
	case "group":
		if a.Group == "" {
			return action{}, fmt.Errorf("no group given")
		}
	case "selection":
		if len(a.IDs) == 0 {
			return action{}, fmt.Errorf("no dead letter selected: tick at least one")
		}
	default:
		return action{}, fmt.Errorf("scope %q: use group or selection", a.Scope)
	}
	return a, nil
}

// maxActionIDs bounds the events one action names.
const maxActionIDs = 100_000

// resolve returns the dead letters a acts on, now, and its group. A
// group's confirmation resolves the group; its apply form carries the IDs
// the confirmation counted, so exactly those (still dead-lettered) are
// replayed or purged, not dead letters that joined the group since.
func (h *handler) resolve(ctx context.Context, t *target, a action) ([]string, *dlGroup, error) {
	if a.Scope == "group" && len(a.IDs) == 0 {
		g, err := h.findGroup(ctx, t, a.Group)
		if err != nil || g == nil {
			return nil, nil, err
		}
		return g.members, g, nil
	}
	var ids []string
	rows, err := t.Pool.Query(ctx, `SELECT id::text FROM `+t.n.outbox+` WHERE id = ANY($1::uuid[]) AND dead_at IS NOT NULL`, a.IDs)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, nil, err
		}
		ids = append(ids, s)
	}
	return ids, nil, rows.Err()
}

type confirmData struct {
	Target *target
	Action action
	Group  *dlGroup
	Count  int
	// Shared counts the rows beyond the first holding one ID (the
	// partitioned layout's IDs are unique per partition only): counted
	// in Count, and acted on too.
	Shared int
	IDs    string // comma-separated, for the apply form
	Back   string
	CSRF   string
}

func (h *handler) confirmAction(w http.ResponseWriter, r *http.Request) {
	t, ok := h.targetFor(r)
	if !ok {
		h.errorPage(w, r, http.StatusNotFound, "No such table.")
		return
	}
	a, err := parseAction(r)
	if err != nil {
		h.errorPage(w, r, http.StatusBadRequest, "Nothing to do: "+err.Error()+".")
		return
	}
	if a.Scope == "group" {
		// The group as it is now; boxes ticked beside it do not count.
		a.IDs = nil
	}
	ids, g, err := h.resolve(r.Context(), t, a)
	if err == nil && g != nil && len(ids) > 0 {
		// Count the rows the apply will act on: those holding the
		// group's IDs, which on the partitioned layout may be more than
		// the group's members (an ID reused in another partition).
		ids, _, err = h.resolve(r.Context(), t, action{Verb: a.Verb, Scope: "selection", IDs: ids})
	}
	if err != nil {
		h.errorPage(w, r, http.StatusBadGateway, "Reading the dead letters failed: "+redactText(err.Error()))
		return
	}
	distinct := slices.Compact(slices.Sorted(slices.Values(ids)))
	d := confirmData{Target: t, Action: a, Group: g, Count: len(ids), Shared: len(ids) - len(distinct), CSRF: h.csrf.token(w, r),
		Back: h.cfg.BasePath + "/deadletters?" + url.Values{"t": {strconv.Itoa(t.idx)}}.Encode()}
	d.IDs = strings.Join(distinct, ",")
	if g != nil {
		d.Back = h.cfg.BasePath + "/deadletters/group?" + url.Values{"t": {strconv.Itoa(t.idx)}, "g": {g.Key}}.Encode()
	}
	h.render(w, r, "confirm", "Confirm "+a.Verb, d)
}

// applyChunk bounds the IDs of one replay or purge statement.
const applyChunk = 1000

func (h *handler) applyAction(w http.ResponseWriter, r *http.Request) {
	t, ok := h.targetFor(r)
	if !ok {
		h.errorPage(w, r, http.StatusNotFound, "No such table.")
		return
	}
	a, err := parseAction(r)
	if err != nil {
		h.errorPage(w, r, http.StatusBadRequest, "Nothing to do: "+err.Error()+".")
		return
	}
	ctx := r.Context()
	ids, g, err := h.resolve(ctx, t, a)
	if err != nil {
		h.errorPage(w, r, http.StatusBadGateway, "Reading the dead letters failed: "+redactText(err.Error()))
		return
	}
	var done int64
	for i := 0; i < len(ids); i += applyChunk {
		chunk := ids[i:min(i+applyChunk, len(ids))]
		f := core.ReplayFilter{DeadOnly: true}
		for _, s := range chunk {
			id, _ := core.ParseID(s)
			f.IDs = append(f.IDs, id)
		}
		var n int64
		if a.Verb == "replay" {
			n, err = t.store.Replay(ctx, f)
		} else {
			n, err = t.store.Purge(ctx, f)
		}
		done += n
		if err != nil {
			break
		}
	}
	attrs := []any{"action", a.Verb, "table", t.Label(), "scope", a.Scope, "who", whoFrom(ctx), "requested", len(ids), "rows", done}
	if a.Scope == "group" {
		attrs = append(attrs, "group", a.Group)
	}
	if g != nil {
		attrs = append(attrs, "type", g.Type, "error", g.Error)
	}
	attrs = append(attrs, "ids", logIDs(ids))
	if err != nil {
		h.log.Error("dashboard action failed", append(attrs, "err", redactText(err.Error()))...)
		h.errorPage(w, r, http.StatusBadGateway, fmt.Sprintf("The %s stopped after %d event(s): %s", a.Verb, done, redactText(err.Error())))
		return
	}
	h.log.Info("dashboard action", attrs...)
	http.Redirect(w, r, h.cfg.BasePath+"/deadletters?"+url.Values{"t": {strconv.Itoa(t.idx)}, "done": {a.Verb}, "n": {strconv.FormatInt(done, 10)}}.Encode(), http.StatusSeeOther)
}

// logIDs lists the IDs an action touched for the audit log, the first
// hundred in full.
func logIDs(ids []string) string {
	if len(ids) <= 100 {
		return strings.Join(ids, ",")
	}
	return strings.Join(ids[:100], ",") + fmt.Sprintf(",… (%d more)", len(ids)-100)
}
