package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxJSONDepth bounds the nesting noDuplicateKeys follows, as
// encoding/json bounds its own: a routes file is two levels deep.
const maxJSONDepth = 100

// noDuplicateKeys reports the first object key that appears twice in one
// object of the JSON document b: at the top level of a routes file an
// event type routed twice, below it a field given twice. encoding/json
// keeps the last value of a duplicate key, so the file would say one
// thing and do another. Syntax errors are left to the decoding that
// follows, which words them better.
func noDuplicateKeys(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	err := walkJSON(dec, nil)
	var dup *duplicateKeyError
	if errors.As(err, &dup) {
		return err
	}
	return nil
}

type duplicateKeyError struct {
	path []string
	key  string
}

func (e *duplicateKeyError) Error() string {
	if len(e.path) == 0 {
		return fmt.Sprintf("event type %q is routed twice", e.key)
	}
	return fmt.Sprintf("%q: key %q appears twice", e.path[0], e.key)
}

// walkJSON reads one value from dec, checking every object in it; path
// holds the keys that lead to it.
func walkJSON(dec *json.Decoder, path []string) error {
	if len(path) > maxJSONDepth {
		return errors.New("nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := kt.(string)
			if seen[key] {
				return &duplicateKeyError{path: path, key: key}
			}
			seen[key] = true
			if err := walkJSON(dec, append(path, key)); err != nil {
				return err
			}
		}
		_, err = dec.Token() // }
		return err
	case json.Delim('['):
		for dec.More() {
			if err := walkJSON(dec, append(path, "")); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ]
		return err
	}
	return nil
}
