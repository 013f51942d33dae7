package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/postgres"
)

// qstashLog is postgres.TransportLog over QStash's REST API: what QStash
// still remembers of the messages carrying the outbox's events.
//
// QStash keys everything by its own message ID, and its logs carry no
// event ID; the event ID is in the message itself (the CloudEvents
// document's id in structured mode, the forwarded ce-id header in binary
// mode). So on its first lookup it reads
//
//   - the DLQ, from the window's start: each entry holds its message, so
//     its event ID, with the last response: those events QStash gave up
//     on;
//   - the logs, newest first, from the window's start, keeping each
//     message's latest state and last error; for the messages still on
//     their way (CREATED, ACTIVE, RETRY, ERROR) it fetches the message
//     (GET /v2/messages/{id}, at most maxInFlight of them) for its event
//     ID.
//
// A delivered message is gone from QStash but for its log lines, which
// do not say which event it carried: a missing event QStash knows nothing
// of was delivered (as far as its logs reach back) and acknowledged by a
// consumer that did not record it.
type qstashLog struct {
	base, token string
	client      *http.Client
	since       time.Time

	once    sync.Once
	err     error
	byEvent map[core.ID]postgres.TransportState
}

// maxInFlight bounds the messages fetched one by one for their event ID.
const maxInFlight = 1000

func newQStashLog(base, token string, since time.Time, client *http.Client) *qstashLog {
	return &qstashLog{base: strings.TrimRight(base, "/"), token: token, since: since, client: client}
}

// Lookup implements postgres.TransportLog.
func (q *qstashLog) Lookup(ctx context.Context, ids []core.ID) (map[core.ID]postgres.TransportState, error) {
	q.once.Do(func() { q.err = q.load(ctx) })
	if q.err != nil {
		return nil, q.err
	}
	out := make(map[core.ID]postgres.TransportState)
	for _, id := range ids {
		if st, ok := q.byEvent[id]; ok {
			out[id] = st
		}
	}
	return out, nil
}

// wireMessage is what QStash returns of a message, in the DLQ and from
// GET /v2/messages/{id}.
type wireQMessage struct {
	MessageID      string              `json:"messageId"`
	Header         map[string][]string `json:"header"`
	Body           string              `json:"body"`
	BodyBase64     string              `json:"bodyBase64"`
	DLQID          string              `json:"dlqId"`
	ResponseStatus int                 `json:"responseStatus"`
	ResponseBody   string              `json:"responseBody"`
	Error          string              `json:"error"`
	FailedAt       int64               `json:"failedAt"`
}

// eventID finds the outbox event a message carries.
func (m *wireQMessage) eventID() (core.ID, bool) {
	for k, vs := range m.Header {
		if k = strings.ToLower(k); (k == "ce-id" || k == "upstash-forward-ce-id") && len(vs) > 0 {
			if id, err := core.ParseID(vs[0]); err == nil {
				return id, true
			}
		}
	}
	body := []byte(m.Body)
	if m.BodyBase64 != "" {
		if b, err := base64.StdEncoding.DecodeString(m.BodyBase64); err == nil {
			body = b
		}
	}
	var ce struct {
		ID          string `json:"id"`
		SpecVersion string `json:"specversion"`
	}
	if json.Unmarshal(body, &ce) == nil && ce.SpecVersion != "" {
		if id, err := core.ParseID(ce.ID); err == nil {
			return id, true
		}
	}
	return core.ID{}, false
}

type wireQLog struct {
	Time             int64  `json:"time"`
	MessageID        string `json:"messageId"`
	State            string `json:"state"`
	Error            string `json:"error"`
	NextDeliveryTime int64  `json:"nextDeliveryTime"`
	ResponseStatus   int    `json:"responseStatus"`
}

func (q *qstashLog) load(ctx context.Context) error {
	q.byEvent = map[core.ID]postgres.TransportState{}
	from := ""
	if !q.since.IsZero() {
		from = strconv.FormatInt(q.since.UnixMilli(), 10)
	}

	// The DLQ: every entry names its event.
	cursor := ""
	for {
		v := url.Values{"count": {"100"}}
		if from != "" {
			v.Set("fromDate", from)
		}
		if cursor != "" {
			v.Set("cursor", cursor)
		}
		var page struct {
			Cursor   string         `json:"cursor"`
			Messages []wireQMessage `json:"messages"`
		}
		if err := q.get(ctx, "/v2/dlq?"+v.Encode(), &page); err != nil {
			return fmt.Errorf("read QStash's DLQ: %w", err)
		}
		for _, m := range page.Messages {
			id, ok := m.eventID()
			if !ok {
				continue
			}
			detail := m.Error
			if detail == "" {
				detail = m.ResponseBody
			}
			q.byEvent[id] = postgres.TransportState{State: "FAILED", DeadLettered: true, MessageID: m.MessageID, DLQID: m.DLQID,
				ResponseStatus: m.ResponseStatus, Error: shortText(detail, 300), At: unixMilli(m.FailedAt)}
		}
		if page.Cursor == "" || len(page.Messages) == 0 {
			break
		}
		cursor = page.Cursor
	}

	// The logs, newest first: each message's latest state, and its last
	// error.
	type latest struct {
		log       wireQLog
		lastError string
	}
	messages := map[string]*latest{}
	var order []string
	cursor = ""
	for {
		v := url.Values{"count": {"1000"}}
		if from != "" {
			v.Set("fromDate", from)
		}
		if cursor != "" {
			v.Set("cursor", cursor)
		}
		var page struct {
			Cursor string     `json:"cursor"`
			Logs   []wireQLog `json:"logs"`
			Events []wireQLog `json:"events"`
		}
		if err := q.get(ctx, "/v2/logs?"+v.Encode(), &page); err != nil {
			return fmt.Errorf("read QStash's logs: %w", err)
		}
		logs := append(page.Logs, page.Events...)
		for _, l := range logs {
			m, ok := messages[l.MessageID]
			if !ok {
				m = &latest{log: l}
				messages[l.MessageID] = m
				order = append(order, l.MessageID)
			}
			if m.lastError == "" && l.Error != "" {
				m.lastError = l.Error
			}
		}
		if page.Cursor == "" || len(logs) == 0 {
			break
		}
		cursor = page.Cursor
	}
	fetched := 0
	for _, msgID := range order {
		m := messages[msgID]
		switch m.log.State {
		case "CREATED", "ACTIVE", "RETRY", "ERROR":
		default:
			continue // delivered, failed (the DLQ has it), cancelled
		}
		if fetched == maxInFlight {
			break
		}
		fetched++
		var msg wireQMessage
		err := q.get(ctx, "/v2/messages/"+url.PathEscape(msgID), &msg)
		if errors.Is(err, errQStashNotFound) {
			continue // delivered or failed since
		}
		if err != nil {
			return fmt.Errorf("read QStash message %s: %w", msgID, err)
		}
		id, ok := msg.eventID()
		if !ok {
			continue
		}
		if st, dead := q.byEvent[id]; dead && st.DeadLettered {
			continue // an earlier message of the event failed; this one is a replay's
		}
		q.byEvent[id] = postgres.TransportState{State: m.log.State, MessageID: msgID, ResponseStatus: m.log.ResponseStatus,
			Error: shortText(m.lastError, 300), At: unixMilli(m.log.Time), NextDelivery: unixMilli(m.log.NextDeliveryTime)}
	}
	return nil
}

var errQStashNotFound = errors.New("not found")

// get reads one QStash API answer into v.
func (q *qstashLog) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, q.base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+q.token)
	resp, err := q.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return errQStashNotFound
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("QStash answered %d: the token is wrong or lacks the right: check --qstash-token or QSTASH_TOKEN", resp.StatusCode)
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("QStash answered %d: %s", resp.StatusCode, shortText(string(body), 200))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("QStash's answer is not the JSON expected: %w", err)
	}
	return nil
}

func unixMilli(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}
