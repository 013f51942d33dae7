package main

import (
	"bytes"
	"encoding/json"
)

// decodeJSON decodes strictly: unknown fields mean a producer and a consumer
// disagree on the schema, which is better found than ignored.
func decodeJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}
