package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// route is where events of one type go: a QStash URL or URL group (or,
// for Watermill transports, a topic), optionally through a QStash queue.
type route struct {
	Destination string
	// Kind is "url", "urlGroup" or "topic" when the JSON object form said
	// which; "" means inferred (a URL when it starts with http:// or
	// https://, otherwise a URL group or a topic).
	Kind  string
	Queue string
}

// loadRoutes reads a --routes file. Two formats, told apart by the first
// non-blank character:
//
// A JSON object mapping event types to destinations; a destination is a
// string, or an object {"url": ...} / {"urlGroup": ...} / {"topic": ...}
// with an optional "queue" (QStash only):
//
//	{"order.confirmed": "https://billing.example.com/qstash/orders",
//	 "order.shipped": {"urlGroup": "shipping", "queue": "shipments"}}
//
// Or one route per line, "type=destination", with blank lines and lines
// starting with # ignored:
//
//	# event type     = destination
//	order.confirmed  = https://billing.example.com/qstash/orders
//	order.shipped    = shipping
func loadRoutes(path string) (map[string]route, error) {
	b, err := readRoutesFile(path)
	if err != nil {
		return nil, usageError(fmt.Sprintf("--routes %s: %v", path, err))
	}
	routes, err := parseRoutes(b)
	if err != nil {
		return nil, usageError(fmt.Sprintf("--routes %s: %v", path, err))
	}
	if len(routes) == 0 {
		return nil, usageError(fmt.Sprintf("--routes %s maps no event type: add lines such as order.confirmed=https://example.com/hooks/orders", path))
	}
	return routes, nil
}

// maxRoutesFileSize bounds a --routes file. Thousands of routes fit in a
// fraction of it; without a bound, --routes /dev/zero reads until memory
// runs out.
const maxRoutesFileSize = 1 << 20

// readRoutesFile reads path, which must be a regular file of at most
// maxRoutesFileSize bytes. A device or a FIFO is refused before it is
// opened (opening a FIFO waits for a writer), and the open file is checked
// again, since the path may have changed in between.
func readRoutesFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := regularAndSmall(st); err != nil {
		return nil, err
	}
	// O_NONBLOCK: should the path have become a FIFO since the Stat, the
	// open returns instead of waiting for a writer; on a regular file it
	// changes nothing.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := regularAndSmall(st); err != nil {
		return nil, err
	}
	// The file may grow while it is read: read one byte past the bound to
	// tell.
	b, err := io.ReadAll(io.LimitReader(f, maxRoutesFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxRoutesFileSize {
		return nil, fmt.Errorf("is larger than 1 MiB: a routes file maps event types to destinations and needs far less")
	}
	return b, nil
}

// regularAndSmall refuses anything but a regular file of at most
// maxRoutesFileSize bytes, saying what it is instead.
func regularAndSmall(st os.FileInfo) error {
	m := st.Mode()
	switch {
	case m.IsDir():
		return errors.New("is a directory, not a routes file")
	case m&os.ModeNamedPipe != 0:
		return errors.New("is a named pipe (FIFO): give a regular file")
	case m&os.ModeSocket != 0:
		return errors.New("is a socket: give a regular file")
	case m&os.ModeDevice != 0:
		return errors.New("is a device, not a regular file")
	case !m.IsRegular():
		return fmt.Errorf("is not a regular file (%s)", m.Type())
	case st.Size() > maxRoutesFileSize:
		return fmt.Errorf("is larger than 1 MiB (%d bytes): a routes file maps event types to destinations and needs far less", st.Size())
	}
	return nil
}

func parseRoutes(b []byte) (map[string]route, error) {
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		return parseJSONRoutes(t)
	}
	routes := map[string]route{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		typ, dest, ok := strings.Cut(line, "=")
		typ, dest = strings.TrimSpace(typ), strings.TrimSpace(dest)
		if !ok || typ == "" || dest == "" {
			return nil, fmt.Errorf("line %d: %q is not type=destination", n, line)
		}
		if _, dup := routes[typ]; dup {
			return nil, fmt.Errorf("line %d: event type %q is routed twice", n, typ)
		}
		routes[typ] = route{Destination: dest}
	}
	return routes, sc.Err()
}

func parseJSONRoutes(b []byte) (map[string]route, error) {
	// json.Unmarshal keeps the last of duplicate keys; the line format
	// refuses an event type routed twice, and so must JSON.
	if err := noDuplicateKeys(b); err != nil {
		return nil, err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("not a JSON object of event type to destination: %v", err)
	}
	routes := make(map[string]route, len(raw))
	for typ, v := range raw {
		if typ == "" {
			return nil, fmt.Errorf("an event type is empty")
		}
		var s string
		if json.Unmarshal(v, &s) == nil {
			if s == "" {
				return nil, fmt.Errorf("%q has an empty destination", typ)
			}
			routes[typ] = route{Destination: s}
			continue
		}
		var o struct {
			URL      string `json:"url"`
			URLGroup string `json:"urlGroup"`
			Topic    string `json:"topic"`
			Queue    string `json:"queue"`
		}
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o); err != nil {
			return nil, fmt.Errorf("%q: want a string or an object with url, urlGroup or topic (and optionally queue): %v", typ, err)
		}
		set := 0
		for _, d := range []string{o.URL, o.URLGroup, o.Topic} {
			if d != "" {
				set++
			}
		}
		if set != 1 {
			return nil, fmt.Errorf("%q: set exactly one of url, urlGroup and topic", typ)
		}
		r := route{Destination: o.URL + o.URLGroup + o.Topic, Queue: o.Queue}
		switch {
		case o.URL != "":
			r.Kind = "url"
		case o.URLGroup != "":
			r.Kind = "urlGroup"
		default:
			r.Kind = "topic"
		}
		routes[typ] = r
	}
	return routes, nil
}
