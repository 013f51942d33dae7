package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
)

// relayHealth is what one relay's /readyz answered.
type relayHealth struct {
	URL       string   `json:"url"`
	Reachable bool     `json:"reachable"`
	Ready     bool     `json:"ready"`
	Status    string   `json:"status"`
	Reasons   []string `json:"reasons,omitempty"`
	Error     string   `json:"error,omitempty"`
	// Sections are the report's other top-level fields (tenants,
	// databases, transport, retention, ...), each as indented JSON.
	Sections []healthSection `json:"sections,omitempty"`
}

type healthSection struct {
	Name string `json:"name"`
	JSON string `json:"json"`
}

// maxHealthBody bounds what the dashboard reads of a /readyz answer.
const maxHealthBody = 1 << 20

// relayHealth asks every configured /readyz at once.
func (h *handler) relayHealth(ctx context.Context) []relayHealth {
	out := make([]relayHealth, len(h.cfg.RelayHealthURLs))
	var wg sync.WaitGroup
	for i, u := range h.cfg.RelayHealthURLs {
		wg.Go(func() { out[i] = h.fetchHealth(ctx, u) })
	}
	wg.Wait()
	return out
}

func (h *handler) fetchHealth(ctx context.Context, u string) relayHealth {
	rh := relayHealth{URL: redactText(u)}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		rh.Error = redactText(err.Error())
		return rh
	}
	req.Header.Set("Accept", "application/json")
	resp, err := h.cfg.HTTPClient.Do(req)
	if err != nil {
		rh.Error = "unreachable: " + redactText(err.Error())
		return rh
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxHealthBody))
	if err != nil {
		rh.Error = "reading the answer: " + redactText(err.Error())
		return rh
	}
	rh.Reachable = true
	var rep map[string]json.RawMessage
	if err := json.Unmarshal(body, &rep); err != nil {
		rh.Error = fmt.Sprintf("answered %s with a body that is not a JSON object", resp.Status)
		rh.Ready = resp.StatusCode == http.StatusOK
		return rh
	}
	_ = json.Unmarshal(rep["ready"], &rh.Ready)
	_ = json.Unmarshal(rep["status"], &rh.Status)
	_ = json.Unmarshal(rep["reasons"], &rh.Reasons)
	for i, r := range rh.Reasons {
		rh.Reasons[i] = redactText(r)
	}
	if rh.Status == "" {
		rh.Status = resp.Status
	}
	names := make([]string, 0, len(rep))
	for k := range rep {
		if k != "ready" && k != "status" && k != "reasons" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		var b bytes.Buffer
		if json.Indent(&b, rep[k], "", "  ") != nil {
			continue
		}
		rh.Sections = append(rh.Sections, healthSection{Name: k, JSON: redactText(b.String())})
	}
	return rh
}
