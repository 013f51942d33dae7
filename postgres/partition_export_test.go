package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Test hooks of the partitioned layout.

// PartitionedForTest is whether the store runs the partitioned layout's
// statements (layout.go).
func (s *Store) PartitionedForTest() bool { return s.partitioned() }

// SetLayoutForTest makes the store take its table for partitioned or
// plain until its next search for the claim floor from the beginning.
func (s *Store) SetLayoutForTest(partitioned bool) { s.sawLayout(partitioned) }

// CreatedFloorForTest and CreatedCeilingForTest are the created_at range
// of the store's claims (createdfloor.go): the zero time for an infinity.
func (s *Store) CreatedFloorForTest() time.Time {
	f := s.plans.floor
	f.mu.Lock()
	defer f.mu.Unlock()
	return testFinite(f.created.floor)
}

func (s *Store) CreatedCeilingForTest() time.Time {
	f := s.plans.floor
	f.mu.Lock()
	defer f.mu.Unlock()
	return testFinite(f.created.ceiling)
}

func testFinite(t pgtype.Timestamptz) time.Time {
	if !t.Valid || t.InfinityModifier != pgtype.Finite {
		return time.Time{}
	}
	return t.Time
}

// SetPlannedRowsForTest sets the statistics a current period's partition
// needs before the store prepares its statements (createdfloor.go).
func (s *Store) SetPlannedRowsForTest(n int) { s.plannedRows = &n }

// PartitionYoungForTest is whether the store plans per execution because
// the current period's partition has no statistics.
func (s *Store) PartitionYoungForTest() bool { return s.partYoung.Load() }

// CreatedProbeForTest is the store's search for the created_at range of
// its claims (createdfloor.go) over the table's partitions as they are
// now, with its arguments.
func (s *Store) CreatedProbeForTest(ctx context.Context) (string, []any, error) {
	p := &Partitions{db: s.db, n: s.n}
	t, err := p.table(ctx, false)
	if err != nil {
		return "", nil, err
	}
	q, args, _ := s.createdProbe(t.parts)
	return q, args, nil
}
