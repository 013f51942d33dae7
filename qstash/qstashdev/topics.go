package qstashdev

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"
)

// URLGroup is a snapshot of a URL group (QStash's "topic"): publishing to
// its name fans the message out, one message per endpoint.
type URLGroup struct {
	// Name is what publishers use as the destination.
	Name string
	// Endpoints each get their own message per publish.
	Endpoints []Endpoint
	// CreatedAt is when the first endpoint was added.
	CreatedAt time.Time
	// UpdatedAt is the last endpoint change.
	UpdatedAt time.Time
}

// Endpoint is one URL of a URL group.
type Endpoint struct {
	// URL receives the group's messages.
	URL string `json:"url"`
	// Name optionally labels the endpoint (endpointName in events).
	Name string `json:"name,omitempty"`
}

type urlGroup struct {
	name      string
	endpoints []Endpoint
	createdAt time.Time
	updatedAt time.Time
}

type wireGroup struct {
	Name      string     `json:"name"`
	CreatedAt int64      `json:"createdAt"`
	UpdatedAt int64      `json:"updatedAt"`
	Endpoints []Endpoint `json:"endpoints"`
}

func (g *urlGroup) wire() wireGroup {
	return wireGroup{Name: g.name, CreatedAt: g.createdAt.UnixMilli(), UpdatedAt: g.updatedAt.UnixMilli(),
		Endpoints: append([]Endpoint{}, g.endpoints...)}
}

// URLGroups returns the URL groups, by name.
func (s *Server) URLGroups() []URLGroup {
	s.mu.Lock()
	out := make([]URLGroup, 0, len(s.groups))
	for _, g := range s.groups {
		out = append(out, URLGroup{Name: g.name, Endpoints: append([]Endpoint(nil), g.endpoints...),
			CreatedAt: g.createdAt, UpdatedAt: g.updatedAt})
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// handleTopics serves GET /v2/topics.
func (s *Server) handleTopics(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w, http.MethodGet)
		return
	}
	s.mu.Lock()
	out := make([]wireGroup, 0, len(s.groups))
	for _, g := range s.groups {
		out = append(out, g.wire())
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	writeJSON(w, http.StatusOK, out)
}

// handleTopic serves GET and DELETE /v2/topics/{name} and POST and DELETE
// /v2/topics/{name}/endpoints ({"endpoints":[{"url","name"}]}). Upserting
// endpoints creates the group; removing the last one deletes it, as in
// QStash.
func (s *Server) handleTopic(w http.ResponseWriter, r *http.Request, name, sub string) {
	if !validName(name) {
		writeError(w, http.StatusBadRequest, "invalid url group name "+name+": use letters, digits, '-', '_' and '.'")
		return
	}
	switch sub {
	case "":
		switch r.Method {
		case http.MethodGet:
			s.mu.Lock()
			g, ok := s.groups[name]
			var out wireGroup
			if ok {
				out = g.wire()
			}
			s.mu.Unlock()
			if !ok {
				writeError(w, http.StatusNotFound, "url group "+name+" not found")
				return
			}
			writeJSON(w, http.StatusOK, out)
		case http.MethodDelete:
			s.mu.Lock()
			_, ok := s.groups[name]
			delete(s.groups, name)
			s.signalChangeLocked()
			s.mu.Unlock()
			if !ok {
				writeError(w, http.StatusNotFound, "url group "+name+" not found")
				return
			}
			w.WriteHeader(http.StatusOK)
		default:
			methodNotAllowed(w, http.MethodGet, http.MethodDelete)
		}
	case "endpoints":
		if r.Method != http.MethodPost && r.Method != http.MethodDelete {
			methodNotAllowed(w, http.MethodPost, http.MethodDelete)
			return
		}
		body, ok := s.readBody(w, r, 1<<20)
		if !ok {
			return
		}
		var req struct {
			Endpoints []Endpoint `json:"endpoints"`
		}
		if err := json.Unmarshal(body, &req); err != nil || len(req.Endpoints) == 0 {
			writeError(w, http.StatusBadRequest, "invalid JSON body: expected {\"endpoints\":[{\"url\":...,\"name\":...}]}")
			return
		}
		if r.Method == http.MethodPost {
			for _, e := range req.Endpoints {
				if aerr := checkLen("endpoint url", e.URL, maxURLBytes); aerr != nil {
					writeAPIError(w, aerr)
					return
				}
				if aerr := checkLen("endpoint name", e.Name, maxOptionBytes); aerr != nil {
					writeAPIError(w, aerr)
					return
				}
				if _, err := parseDestinationURL(e.URL); err != nil {
					writeError(w, http.StatusBadRequest, "endpoint url: "+err.Error())
					return
				}
			}
			if aerr := s.upsertEndpoints(name, req.Endpoints); aerr != nil {
				writeAPIError(w, aerr)
				return
			}
		} else if !s.removeEndpoints(name, req.Endpoints) {
			writeError(w, http.StatusNotFound, "url group "+name+" not found")
			return
		}
		w.WriteHeader(http.StatusOK)
	default:
		writeError(w, http.StatusNotFound, "unknown path")
	}
}

func (s *Server) upsertEndpoints(name string, eps []Endpoint) *apiError {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	g := s.groups[name]
	if g == nil && len(s.groups) >= s.cfg.MaxURLGroups {
		return limitReached("url group %q not created: the server holds %d URL groups, its limit (Config.MaxURLGroups); delete one with DELETE /v2/topics/<name>", name, s.cfg.MaxURLGroups)
	}
	var have []Endpoint
	if g != nil {
		have = g.endpoints
	}
	if n := len(have) + newEndpoints(have, eps); n > maxGroupEndpoints {
		return limitReached("url group %q would hold %d endpoints, beyond the limit of %d: remove some first", name, n, maxGroupEndpoints)
	}
	if g == nil {
		g = &urlGroup{name: name, createdAt: now}
		s.groups[name] = g
	}
	g.updatedAt = now
	// Endpoints are matched by URL; a new name for a known URL renames it.
next:
	for _, e := range eps {
		for i := range g.endpoints {
			if g.endpoints[i].URL == e.URL {
				g.endpoints[i].Name = e.Name
				continue next
			}
		}
		g.endpoints = append(g.endpoints, e)
	}
	s.signalChangeLocked()
	return nil
}

// newEndpoints counts the URLs of eps that have does not hold yet, each
// once: the endpoints an upsert adds.
func newEndpoints(have, eps []Endpoint) int {
	known := make(map[string]bool, len(have)+len(eps))
	for _, e := range have {
		known[e.URL] = true
	}
	n := 0
	for _, e := range eps {
		if !known[e.URL] {
			known[e.URL] = true
			n++
		}
	}
	return n
}

func (s *Server) removeEndpoints(name string, eps []Endpoint) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[name]
	if g == nil {
		return false
	}
	kept := g.endpoints[:0]
	for _, have := range g.endpoints {
		drop := false
		for _, e := range eps {
			if e.URL != "" && e.URL == have.URL || e.URL == "" && e.Name != "" && e.Name == have.Name {
				drop = true
				break
			}
		}
		if !drop {
			kept = append(kept, have)
		}
	}
	g.endpoints = kept
	g.updatedAt = s.clock.Now()
	if len(g.endpoints) == 0 {
		delete(s.groups, name)
	}
	s.signalChangeLocked()
	return true
}
