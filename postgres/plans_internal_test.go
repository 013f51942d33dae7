package postgres

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Only a pool that prepares statements gets its relay statements planned
// per execution while the table is young; a pool that never prepares is
// left alone.
func TestPlanModeFollowsThePool(t *testing.T) {
	cases := []struct {
		params string
		want   pgx.QueryExecMode
	}{
		{"", pgx.QueryExecModeCacheDescribe},
		{"&description_cache_capacity=0", pgx.QueryExecModeDescribeExec},
		{"&statement_cache_capacity=0", 0},
		{"&default_query_exec_mode=simple_protocol", 0},
		{"&default_query_exec_mode=exec", 0},
		{"&default_query_exec_mode=cache_describe", 0},
	}
	for _, c := range cases {
		cfg, err := pgxpool.ParseConfig("postgres://u@127.0.0.1:1/db?sslmode=disable" + c.params)
		if err != nil {
			t.Fatal(err)
		}
		pool, err := pgxpool.NewWithConfig(t.Context(), cfg) // connects lazily
		if err != nil {
			t.Fatal(err)
		}
		got := newPlanMode(pool).young
		pool.Close()
		if got != c.want {
			t.Errorf("%q: young-table mode %v, want %v", c.params, got, c.want)
		}
	}
}
