package qstashdev

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// QStash's list and bulk endpoints take their IDs and filters as query
// parameters, several values per filter either repeated
// (label=a&label=b) or comma-separated (label=a,b), matched with OR within
// a filter and AND across filters. The official TypeScript SDK sends every
// bulk request that way, with no body; the Go SDK sends IDs in a JSON body
// instead, which is accepted too.

// filterParam describes a query parameter of the list and bulk endpoints.
type filterParam struct {
	// commas: values may be comma-separated. Not for URLs and paths,
	// which may hold commas themselves.
	commas bool
}

var filterParams = map[string]filterParam{
	"messageId":      {},
	"url":            {},
	"topicName":      {commas: true},
	"urlGroup":       {commas: true},
	"scheduleId":     {commas: true},
	"queueName":      {commas: true},
	"label":          {commas: true},
	"flowControlKey": {commas: true},
	"callerIp":       {commas: true},
	"callerIP":       {commas: true},
	"responseStatus": {commas: true},
	"state":          {commas: true},
	"host":           {commas: true},
	"path":           {},
}

// listParams are the parameters every list endpoint takes besides filters.
var listParams = []string{"cursor", "count", "order", "fromDate", "toDate", "api", "async", tokenParam}

// filters is a parsed set of filters. A nil or empty set matches
// everything.
type filters struct {
	vals     map[string][]string
	from, to time.Time
	statuses []int
}

func (f *filters) empty() bool {
	return f == nil || len(f.vals) == 0 && f.from.IsZero() && f.to.IsZero() && len(f.statuses) == 0
}

// queryValues splits a parameter's values: repeated, and comma-separated
// where p allows. Empty values are refused: "messageIds=" must not read as
// "no filter", which for a bulk cancel would mean all messages.
func queryValues(name string, raw []string, commas bool) ([]string, *apiError) {
	var out []string
	for _, v := range raw {
		parts := []string{v}
		if commas {
			parts = strings.Split(v, ",")
		}
		for _, p := range parts {
			p = strings.TrimSpace(p)
			if p == "" {
				return nil, badRequest("query parameter %s has an empty value: leave the parameter out instead", name)
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// parseFilters reads the filters of q that allowed names. With strict,
// any other parameter (but the list parameters and idParam) is refused:
// a destructive bulk request must never match more than asked because of
// a misspelled or unsupported filter. Without, unknown parameters are
// ignored, as a list is harmless.
func parseFilters(q url.Values, allowed []string, idParam string, strict bool) (*filters, *apiError) {
	f := &filters{vals: map[string][]string{}}
	for name, raw := range q {
		switch {
		case name == idParam || slices.Contains(listParams, name):
			continue
		case !slices.Contains(allowed, name):
			if strict {
				return nil, badRequest("unknown query parameter %q: this endpoint filters by %s", name, strings.Join(allowed, ", "))
			}
			continue
		}
		vals, aerr := queryValues(name, raw, filterParams[name].commas)
		if aerr != nil {
			return nil, aerr
		}
		switch name {
		case "urlGroup":
			name = "topicName"
		case "callerIP":
			name = "callerIp"
		case "responseStatus":
			for _, v := range vals {
				n, err := strconv.Atoi(v)
				if err != nil {
					return nil, badRequest("responseStatus must be an integer, got %q", v)
				}
				f.statuses = append(f.statuses, n)
			}
			continue
		case "state":
			vals = expandStates(vals)
		}
		f.vals[name] = append(f.vals[name], vals...)
	}
	var err error
	if f.from, f.to, err = dateRange(q.Get("fromDate"), q.Get("toDate")); err != nil {
		return nil, badRequest("%v", err)
	}
	return f, nil
}

// expandStates reads state filters: IN_PROGRESS means ACTIVE, RETRY or
// ERROR, as in QStash's API reference, and CANCELED, the TypeScript SDK's
// spelling, means CANCELLED, QStash's.
func expandStates(vals []string) []string {
	var out []string
	for _, v := range vals {
		switch v = strings.ToUpper(v); v {
		case "IN_PROGRESS":
			out = append(out, StateActive, StateRetry, StateError)
		case "CANCELED":
			out = append(out, StateCancelled)
		default:
			out = append(out, v)
		}
	}
	return out
}

// record is what a filter looks at in a message, a DLQ entry or an event.
type record struct {
	messageID, url, group, queue, fcKey, callerIP, scheduleID, state string
	labels                                                           []string
	status                                                           int
	at                                                               time.Time
}

func (f *filters) match(r *record) bool {
	if f == nil {
		return true
	}
	if !inRange(r.at, f.from, f.to) {
		return false
	}
	if len(f.statuses) > 0 && !slices.Contains(f.statuses, r.status) {
		return false
	}
	for name, want := range f.vals {
		var ok bool
		switch name {
		case "messageId":
			ok = slices.Contains(want, r.messageID)
		case "url":
			ok = slices.Contains(want, r.url)
		case "topicName":
			ok = slices.Contains(want, r.group)
		case "scheduleId":
			ok = slices.Contains(want, r.scheduleID)
		case "queueName":
			ok = slices.Contains(want, r.queue)
		case "flowControlKey":
			ok = slices.Contains(want, r.fcKey)
		case "callerIp":
			ok = slices.Contains(want, r.callerIP)
		case "state":
			ok = slices.Contains(want, r.state)
		case "label":
			for _, l := range r.labels {
				if slices.Contains(want, l) {
					ok = true
					break
				}
			}
		case "host", "path":
			u, err := url.Parse(r.url)
			if err != nil {
				return false
			}
			if name == "host" {
				ok = slices.Contains(want, u.Host) || slices.Contains(want, u.Hostname())
			} else {
				ok = slices.Contains(want, u.Path)
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// bulkIDs collects the IDs of a bulk request: the repeated query parameter
// name (the TypeScript SDK's form, and the API reference's) and the JSON
// body {"<name>": [...]} (the Go SDK's). present reports whether either
// named IDs at all; an empty list named explicitly matches nothing.
func (s *Server) bulkIDs(w http.ResponseWriter, r *http.Request, name string) (ids []string, present, ok bool) {
	q := r.URL.Query()
	if raw, has := q[name]; has {
		vals, aerr := queryValues(name, raw, true)
		if aerr != nil {
			writeAPIError(w, aerr)
			return nil, false, false
		}
		ids, present = vals, true
	}
	body, ok := s.readBody(w, r, 1<<20)
	if !ok {
		return nil, false, false
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		var req map[string]json.RawMessage
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, "invalid JSON body: expected {\""+name+"\":[...]}, or the IDs as query parameters "+name+"=a&"+name+"=b")
			return nil, false, false
		}
		if raw, has := req[name]; has {
			var list []string
			if err := json.Unmarshal(raw, &list); err != nil {
				writeError(w, http.StatusBadRequest, "invalid JSON body: "+name+" must be an array of strings")
				return nil, false, false
			}
			ids, present = append(ids, list...), true
		}
		for k := range req {
			if k != name {
				writeError(w, http.StatusBadRequest, "invalid JSON body: unknown field "+strconv.Quote(k)+"; only "+name+" is read, filters go in the query")
				return nil, false, false
			}
		}
	}
	return ids, present, true
}

// parseLabels splits an Upstash-Label header: several labels are
// comma-separated (the SDK joins label: [a, b] into "a,b").
func parseLabels(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func firstLabel(labels []string) string {
	if len(labels) == 0 {
		return ""
	}
	return labels[0]
}
