package core

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Typed returns a Handler that decodes the event's payload as JSON into a T
// and calls fn with it, so registration stays one line:
//
//	mux.Register("order.paid", core.Typed(func(ctx context.Context, e core.Event, p OrderPaid) error {
//		return markPaid(ctx, p.OrderID, p.Amount)
//	}))
//
// A payload that does not decode (not JSON, or JSON of another shape) fails
// with a Permanent error naming the event's ID and type: redelivering the
// same bytes cannot succeed, so the transport dead-letters the event. Fields
// of the payload that T lacks are ignored, as encoding/json does; use
// TypedStrict to refuse them.
func Typed[T any](fn func(ctx context.Context, e Event, v T) error) Handler {
	return typed(fn, false)
}

// TypedStrict is Typed refusing payloads with fields T does not declare
// (json.Decoder.DisallowUnknownFields), and anything after the JSON value,
// as permanent errors. Use it where an unknown field means the producer
// moved to a schema this consumer does not understand; bump SchemaVersion
// for such changes instead where you can.
func TypedStrict[T any](fn func(ctx context.Context, e Event, v T) error) Handler {
	return typed(fn, true)
}

func typed[T any](fn func(ctx context.Context, e Event, v T) error, strict bool) Handler {
	if fn == nil {
		panic("outboxkit: Typed needs a function")
	}
	return HandlerFunc(func(ctx context.Context, e Event) error {
		var v T
		if err := decodePayload(e.Payload, &v, strict); err != nil {
			return Permanent(fmt.Errorf("outboxkit: event %s (%s): decode payload into %T: %w", e.ID, e.Type, v, err))
		}
		return fn(ctx, e, v)
	})
}

func decodePayload(p []byte, v any, strict bool) error {
	if !strict {
		return json.Unmarshal(p, v)
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}
