package qstashdev

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzParseBatchFast checks the fast batch decoder against encoding/json:
// whenever the fast path accepts an input, it must decode it exactly as
// encoding/json does. The seeds run as a unit test.
func FuzzParseBatchFast(f *testing.F) {
	for _, seed := range []string{
		`[]`,
		` [ ] `,
		`[{"destination":"https://x.io/a","headers":{"Content-Type":"application/json","upstash-forward-x-a":"1"},"body":"{\"a\":1}","queue":""}]`,
		`[{"destination":"g","body":"line\nbreak \u00e9 \ud83d\ude00 \/ \\ \t"},{"destination":"h"}]`,
		`[{"destination":"a","headers":{"X":"1","X":"2"}}]`,
		`[{"destination":"a","headers":{"X":["1","2"]}}]`,
		`[{"destination":"a","extra":1}]`,
		`[{"destination":"a","body":null}]`,
		`[{"destination":"a","body":"\ud800"}]`,
		`[{"destination":"a","body":"\ud800\u0041"}]`,
		`[{"destination":"a","body":"\xff"}]`,
		`[{"destination":"a"},]`,
		`[{"destination":"a"}] x`,
		`{"destination":"a"}`,
		`[{"destination":"a","headers":{"K\u0041":"v"}}]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, err := parseBatchFast(data)
		if err != nil {
			return // the caller falls back to encoding/json
		}
		var std []batchItem
		if err := json.Unmarshal(data, &std); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", data, err)
		}
		if len(fast) == 0 && len(std) == 0 {
			return
		}
		if !reflect.DeepEqual(fast, std) {
			t.Fatalf("decoding %q:\nfast %#v\nstd  %#v", data, fast, std)
		}
	})
}
