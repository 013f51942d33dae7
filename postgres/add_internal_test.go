package postgres

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/outboxkit/outboxkit/internal/pgtest"
)

// TestJSONBProblemAgreesWithPostgreSQL checks the pre-flight check against
// the server's own jsonb parser, case by case.
func TestJSONBProblemAgreesWithPostgreSQL(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, 1)
	cases := []string{
		`{}`, `"plain"`, `"\u0000"`, `{"a":"x\u0000"}`, `"\\u0000"`, `"\\\u0000"`, `"\\\\u0000"`,
		`"\ud800"`, `"\udc00"`, `"\ud83d\ude00"`, `"\ud83d\u0041"`, `"\ud83dx"`, `"\ud83d\n"`,
		`["\ud83d\ude00", "\u00e9"]`, `"\u0041\u0001"`, `{"\u0000": 1}`, `"\ud83d"`, `"\\ud800"`,
	}
	for _, c := range cases {
		if !json.Valid([]byte(c)) {
			t.Fatalf("case %s is not valid JSON", c)
		}
		var ok bool
		err := pool.QueryRow(context.Background(), "SELECT pg_input_is_valid($1, 'jsonb')", c).Scan(&ok)
		if err != nil {
			// PostgreSQL before 16 has no pg_input_is_valid: try the cast.
			_, castErr := pool.Exec(context.Background(), "SELECT $1::text::jsonb", c)
			ok = castErr == nil
		}
		if got := jsonbProblem([]byte(c)) == ""; got != ok {
			t.Errorf("%s: jsonbProblem says storable=%v, PostgreSQL says %v", c, got, ok)
		}
	}
}
