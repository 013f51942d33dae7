package qstashdev_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	_ "time/tzdata"

	"github.com/golang-jwt/jwt/v5"

	"github.com/outboxkit/outboxkit/core/coretest"
	"github.com/outboxkit/outboxkit/internal/qstashdevtest"
	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

type wireSchedule struct {
	ScheduleID         string              `json:"scheduleId"`
	Cron               string              `json:"cron"`
	CreatedAt          int64               `json:"createdAt"`
	Destination        string              `json:"destination"`
	Method             string              `json:"method"`
	Header             map[string][]string `json:"header"`
	Body               string              `json:"body"`
	Retries            int                 `json:"retries"`
	IsPaused           bool                `json:"isPaused"`
	Labels             []string            `json:"labels"`
	QueueName          string              `json:"queueName"`
	NextScheduleTime   int64               `json:"nextScheduleTime"`
	LastScheduleTime   int64               `json:"lastScheduleTime"`
	LastScheduleStates map[string]string   `json:"lastScheduleStates"`
}

func createSchedule(t *testing.T, h *qstashdevtest.Harness, dest string, header http.Header, body string) string {
	t.Helper()
	status, _, b := h.Do(http.MethodPost, "/v2/schedules/"+dest, header, body)
	if status != http.StatusOK {
		t.Fatalf("create schedule: %d %s", status, b)
	}
	var res struct {
		ScheduleID string `json:"scheduleId"`
	}
	mustJSON(t, b, &res)
	if res.ScheduleID == "" {
		t.Fatalf("create schedule: %s", b)
	}
	return res.ScheduleID
}

func getSchedule(t *testing.T, h *qstashdevtest.Harness, id string) wireSchedule {
	t.Helper()
	status, _, b := h.Do(http.MethodGet, "/v2/schedules/"+id, nil, "")
	if status != http.StatusOK {
		t.Fatalf("get schedule %s: %d %s", id, status, b)
	}
	var s wireSchedule
	mustJSON(t, b, &s)
	return s
}

// fire moves the clock to the schedule's next run and waits for what it
// published to settle.
func fire(t *testing.T, h *qstashdevtest.Harness, clock qstashdevtest.FakeClock, at time.Time) {
	t.Helper()
	clock.WaitTimer(t, at)
	clock.Set(at)
	h.WaitFor("the run at "+at.String(), func() bool {
		for _, s := range h.Server.Schedules() {
			if !s.NextScheduleTime.After(at) && !s.Paused {
				return false
			}
		}
		return true
	})
	h.WaitIdle()
}

func nextMinute(t time.Time) time.Time { return t.Truncate(time.Minute).Add(time.Minute) }

func TestSchedule(t *testing.T) {
	t.Parallel()
	clock := qstashdevtest.NewFakeClock()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Clock: clock})
	dst := qstashdevtest.NewSink(t, nil)
	id := createSchedule(t, h, dst.URL("/tick?x=1"), hdr("Upstash-Cron", "* * * * *", "Content-Type", "application/json",
		"Upstash-Forward-X-Job", "drain", "Upstash-Label", "cron,relay", "Upstash-Retries", "2"), `{"run":true}`)
	if !strings.HasPrefix(id, "scd_") {
		t.Fatalf("schedule id %q", id)
	}
	at := nextMinute(clock.Now())
	s := getSchedule(t, h, id)
	if s.Cron != "* * * * *" || s.Destination != dst.URL("/tick?x=1") || s.Body != `{"run":true}` || s.Retries != 2 ||
		s.Method != "POST" || s.IsPaused || s.NextScheduleTime != at.UnixMilli() || s.LastScheduleTime != 0 ||
		s.Header["X-Job"][0] != "drain" || strings.Join(s.Labels, ",") != "cron,relay" {
		t.Fatalf("schedule %+v", s)
	}

	fire(t, h, clock, at)
	got := dst.Deliveries()
	if len(got) != 1 {
		t.Fatalf("deliveries after the first run: %d, want 1", len(got))
	}
	d := got[0]
	if d.Path != "/tick?x=1" || string(d.Body) != `{"run":true}` || d.Header.Get("X-Job") != "drain" ||
		d.Header.Get("Upstash-Schedule-Id") != id || d.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("delivery %+v", d)
	}
	// Signed like any delivery, at the server's (fake) time.
	claims := jwt.MapClaims{}
	if _, err := jwt.ParseWithClaims(d.Header.Get("Upstash-Signature"), claims, func(*jwt.Token) (any, error) {
		return []byte(qstashdev.DefaultCurrentSigningKey), nil
	}, jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired(), jwt.WithIssuer("Upstash"), jwt.WithTimeFunc(clock.Now)); err != nil {
		t.Fatalf("signature: %v", err)
	}
	if claims["sub"] != dst.URL("/tick?x=1") || claims["iat"] != float64(at.Unix()) {
		t.Fatalf("claims %v", claims)
	}
	msgID := d.Header.Get("Upstash-Message-Id")
	s = getSchedule(t, h, id)
	if s.LastScheduleTime != at.UnixMilli() || s.NextScheduleTime != at.Add(time.Minute).UnixMilli() || s.LastScheduleStates[msgID] != "SUCCESS" {
		t.Fatalf("after a run: %+v", s)
	}
	_, _, b := h.Do(http.MethodGet, "/v2/events?scheduleId="+id+"&state=DELIVERED", nil, "")
	if !strings.Contains(string(b), msgID) || !strings.Contains(string(b), `"scheduleId":"`+id+`"`) {
		t.Fatalf("events by scheduleId: %s", b)
	}

	// Paused, the runs are skipped; resumed (PATCH, as the SDKs send it),
	// they come back.
	if status, _, b := h.Do(http.MethodPost, "/v2/schedules/"+id+"/pause", nil, ""); status != http.StatusOK {
		t.Fatalf("pause: %d %s", status, b)
	}
	if !getSchedule(t, h, id).IsPaused {
		t.Fatal("not paused")
	}
	at = at.Add(time.Minute)
	clock.WaitTimer(t, at)
	clock.Set(at)
	h.WaitFor("the skipped run", func() bool { return h.Server.Schedules()[0].NextScheduleTime.After(at) })
	h.WaitIdle()
	if n := dst.Count(); n != 1 {
		t.Fatalf("a paused schedule delivered: %d deliveries", n)
	}
	if status, _, b := h.Do(http.MethodPatch, "/v2/schedules/"+id+"/resume", nil, ""); status != http.StatusOK {
		t.Fatalf("resume: %d %s", status, b)
	}
	at = at.Add(time.Minute)
	fire(t, h, clock, at)
	if n := dst.Count(); n != 2 {
		t.Fatalf("deliveries after resume: %d, want 2", n)
	}

	// The clock jumping over many runs fires once, then goes on from there.
	far := at.Add(10 * time.Minute)
	clock.WaitTimer(t, at.Add(time.Minute))
	clock.Set(far)
	h.WaitFor("the run after the jump", func() bool { return h.Server.Schedules()[0].NextScheduleTime.After(far) })
	h.WaitIdle()
	if n := dst.Count(); n != 3 {
		t.Fatalf("deliveries after a 10-minute jump: %d, want 3", n)
	}
	if next := getSchedule(t, h, id).NextScheduleTime; next != far.Add(time.Minute).UnixMilli() {
		t.Fatalf("next run %d, want %d", next, far.Add(time.Minute).UnixMilli())
	}

	if status, _, b := h.Do(http.MethodGet, "/v2/schedules", nil, ""); status != http.StatusOK || !strings.Contains(string(b), id) {
		t.Fatalf("list: %d %s", status, b)
	}
	if status, _, b := h.Do(http.MethodDelete, "/v2/schedules/"+id, nil, ""); status != http.StatusOK {
		t.Fatalf("delete: %d %s", status, b)
	}
	if status, _, _ := h.Do(http.MethodGet, "/v2/schedules/"+id, nil, ""); status != http.StatusNotFound {
		t.Fatalf("get after delete: %d", status)
	}
	clock.Advance(5 * time.Minute)
	h.WaitIdle()
	if n := dst.Count(); n != 3 {
		t.Fatalf("a deleted schedule delivered: %d", n)
	}
}

// CRON_TZ runs a schedule on a zone's wall clock, across a daylight-saving
// change.
func TestScheduleCronTZ(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	// The day before New York's clocks spring forward.
	clock := qstashdevtest.FakeClock{FakeClock: coretest.NewFakeClock(time.Date(2026, 3, 7, 8, 0, 0, 0, ny))}
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Clock: clock})
	dst := qstashdevtest.NewSink(t, nil)
	id := createSchedule(t, h, dst.URL("/nine"), hdr("Upstash-Cron", "CRON_TZ=America/New_York 0 9 * * *"), "")
	first := time.Date(2026, 3, 7, 9, 0, 0, 0, ny)
	if s := getSchedule(t, h, id); s.NextScheduleTime != first.UnixMilli() {
		t.Fatalf("next %v, want %v", time.UnixMilli(s.NextScheduleTime).UTC(), first.UTC())
	}
	fire(t, h, clock, first)
	second := time.Date(2026, 3, 8, 9, 0, 0, 0, ny)
	if got := second.Sub(first); got != 23*time.Hour {
		t.Fatalf("test premise: %v between the runs", got)
	}
	fire(t, h, clock, second)
	if n := dst.Count(); n != 2 {
		t.Fatalf("deliveries %d, want 2", n)
	}
}

// A schedule's runs go through its queue; Upstash-Schedule-Id names the
// schedule, and sending it again updates the schedule in place.
func TestScheduleQueueAndUpdate(t *testing.T) {
	t.Parallel()
	clock := qstashdevtest.NewFakeClock()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{Clock: clock})
	dst := qstashdevtest.NewSink(t, nil)
	id := createSchedule(t, h, dst.URL("/q"), hdr("Upstash-Cron", "*/5 * * * *", "Upstash-Schedule-Id", "nightly", "Upstash-Queue-Name", "jobs"), "v1")
	if id != "nightly" {
		t.Fatalf("id %q, want nightly", id)
	}
	created := getSchedule(t, h, id).CreatedAt
	clock.Advance(time.Second)
	createSchedule(t, h, dst.URL("/q"), hdr("Upstash-Cron", "*/5 * * * *", "Upstash-Schedule-Id", "nightly", "Upstash-Queue-Name", "jobs"), "v2")
	s := getSchedule(t, h, id)
	if s.Body != "v2" || s.CreatedAt != created || s.QueueName != "jobs" {
		t.Fatalf("updated schedule %+v (created %d)", s, created)
	}
	if n := len(h.Server.Schedules()); n != 1 {
		t.Fatalf("%d schedules after an update, want 1", n)
	}
	fire(t, h, clock, time.UnixMilli(s.NextScheduleTime))
	got := dst.Deliveries()
	if len(got) != 1 || string(got[0].Body) != "v2" {
		t.Fatalf("deliveries %+v", got)
	}
	var q struct {
		Name string `json:"name"`
	}
	_, _, b := h.Do(http.MethodGet, "/v2/queues/jobs", nil, "")
	if err := json.Unmarshal(b, &q); err != nil || q.Name != "jobs" {
		t.Fatalf("the run did not go through queue jobs: %s", b)
	}
}

func TestScheduleRefused(t *testing.T) {
	t.Parallel()
	h := qstashdevtest.NewHarness(t, qstashdev.Config{MaxSchedules: 1})
	dst := qstashdevtest.NewSink(t, nil)
	for _, c := range []struct {
		header http.Header
		status int
	}{
		{hdr("Upstash-Cron", "61 * * * *"), http.StatusBadRequest},
		{hdr("Upstash-Cron", "CRON_TZ=Mars/Olympus * * * * *"), http.StatusBadRequest},
		{hdr("Upstash-Cron", "* * * * *", "Upstash-Schedule-Id", "no spaces"), http.StatusBadRequest},
	} {
		if status, _, b := h.Do(http.MethodPost, "/v2/schedules/"+dst.URL("/x"), c.header, ""); status != c.status {
			t.Errorf("%v: %d %s, want %d", c.header, status, b, c.status)
		}
	}
	createSchedule(t, h, dst.URL("/x"), hdr("Upstash-Cron", "* * * * *"), "")
	if status, _, b := h.Do(http.MethodPost, "/v2/schedules/"+dst.URL("/x"), hdr("Upstash-Cron", "* * * * *"), ""); status != http.StatusPreconditionFailed {
		t.Errorf("beyond MaxSchedules: %d %s, want 412", status, b)
	}
	if status, _, _ := h.Do(http.MethodPost, "/v2/schedules/nope/pause", nil, ""); status != http.StatusNotFound {
		t.Errorf("pause of an unknown schedule: %d, want 404", status)
	}
}
