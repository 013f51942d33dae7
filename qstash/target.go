package qstash

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ErrNoRoute is matched for an event that no route, no default Destination
// and no Event.Destination sends anywhere. It is a transient error that also
// matches ErrConfiguration: the event stays pending (retried with the
// relay's backoff) until the configuration gains a route for it.
var ErrNoRoute = errors.New("qstash: no destination for event")

// Target is where QStash delivers a message: an endpoint URL or a URL group,
// published directly or through a queue.
type Target struct {
	// URL is the absolute http(s) URL of the consumer endpoint. It is also the
	// `sub` claim of the delivery's signature, so the receiver must be
	// configured with exactly this URL. Set exactly one of URL and URLGroup.
	URL string
	// URLGroup names a URL group: QStash delivers a copy to each of its
	// endpoints.
	URLGroup string
	// Queue, when set, sends the message through that queue
	// (`/v2/enqueue/{queue}/{destination}`): FIFO, with the queue's
	// parallelism. QStash creates an unknown queue with parallelism 1.
	Queue string
}

// ParseTarget reads a destination string the way Event.Destination is read:
// an absolute http:// or https:// URL is a URL, anything else must be a URL
// group name (letters, digits, '-', '_' and '.', as QStash allows). Other
// schemes (javascript:, ftp://, ...) and anything that would change the API
// path are refused.
func ParseTarget(s string) (Target, error) {
	var t Target
	if hasHTTPScheme(s) {
		t.URL = s
	} else {
		t.URLGroup = s
	}
	if err := t.validate(); err != nil {
		if t.URLGroup != "" && strings.Contains(s, ":") {
			return Target{}, fmt.Errorf("destination %q is neither an absolute http(s) URL nor a URL group name: %w", truncate(s), err)
		}
		return Target{}, err
	}
	return t, nil
}

// IsZero reports whether t names no destination.
func (t Target) IsZero() bool { return t == Target{} }

// destination is the string QStash expects in the path or the batch element.
func (t Target) destination() string {
	if t.URL != "" {
		return t.URL
	}
	return t.URLGroup
}

// String describes t for logs: the destination, and the queue if any.
func (t Target) String() string {
	if t.Queue != "" {
		return "queue " + t.Queue + " → " + t.destination()
	}
	return t.destination()
}

// validate checks t before anything is sent, so a typo fails at construction
// (for configured targets) or marks only the affected event (for routed
// ones), instead of coming back as a 400 for the whole batch.
func (t Target) validate() error {
	switch {
	case t.URL != "" && t.URLGroup != "":
		return fmt.Errorf("target sets both URL %q and URLGroup %q: set exactly one", t.URL, t.URLGroup)
	case t.URL == "" && t.URLGroup == "":
		return errors.New("target sets neither URL nor URLGroup: set exactly one")
	case t.URL != "":
		if err := validateURL(t.URL); err != nil {
			return err
		}
	default:
		if err := validateName("URL group", t.URLGroup); err != nil {
			return err
		}
	}
	if t.Queue != "" {
		return validateName("queue", t.Queue)
	}
	return nil
}

func hasHTTPScheme(s string) bool {
	return len(s) >= 7 && strings.EqualFold(s[:7], "http://") || len(s) >= 8 && strings.EqualFold(s[:8], "https://")
}

// validateURL accepts what QStash can deliver to. The URL travels unescaped in
// the request path, as the official SDKs send it, so it must not carry a
// fragment (dropped by HTTP clients) or characters that break a request line.
func validateURL(s string) error {
	if strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("URL %q contains spaces or control characters: percent-encode them", s)
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("URL %q: %v", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("URL %q is not an absolute http(s) URL such as https://api.example.com/events", s)
	}
	if u.Fragment != "" || strings.Contains(s, "#") {
		return fmt.Errorf("URL %q has a fragment (#...): QStash cannot deliver it, remove it", s)
	}
	return nil
}

// maxNameLen bounds queue and URL group names. QStash documents no limit;
// this one keeps a runaway value out of every request path.
const maxNameLen = 255

// validateName checks a queue or URL group name against the characters
// QStash allows in them: "URL Group names are restricted to alphanumeric,
// underscore, hyphen and dot characters" (Upstash, "Create URL Groups and
// Endpoints"); qstashdev applies the same rule to queues. Names travel as
// path segments of the API request (/v2/publish/<group>,
// /v2/enqueue/<queue>/...), so "." and "..", which a proxy would resolve as
// dot-segments, are refused too.
func validateName(kind, s string) error {
	const allowed = "use only letters, digits, '-', '_' and '.'"
	switch {
	case s == "":
		return fmt.Errorf("%s name is empty: %s", kind, allowed)
	case len(s) > maxNameLen:
		return fmt.Errorf("%s name is %d bytes long: the limit is %d (%s)", kind, len(s), maxNameLen, allowed)
	case strings.Trim(s, ".") == "":
		return fmt.Errorf("%s name %q is a path dot-segment: %s, and not only dots", kind, s, allowed)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("%s name %q contains %q, which QStash does not allow: %s", kind, truncate(s), r, allowed)
		}
	}
	return nil
}
