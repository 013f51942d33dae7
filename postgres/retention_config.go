package postgres

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/outboxkit/outboxkit/core"
	"github.com/outboxkit/outboxkit/internal/logs"
)

// RetainForever, as RetentionConfig.RetainPublished or RetainProcessed,
// keeps every row of that kind: Retention deletes none of them. Any
// negative duration means the same; zero means the default, as everywhere
// in this package's configs (River's job cleaner reads -1 the same way).
// A flag where 0 means "keep everything" translates 0 to RetainForever.
const RetainForever time.Duration = -1

// Retention defaults.
const (
	// DefaultRetainPublished is how long published events are kept.
	DefaultRetainPublished = 7 * 24 * time.Hour
	// DefaultRetainProcessed is how long processed-event records are
	// kept: longer than published events, since replaying an event whose
	// record is gone applies its effect again.
	DefaultRetainProcessed = 30 * 24 * time.Hour
	// DefaultRetentionBatchPause is the pause after each full batch.
	DefaultRetentionBatchPause = 100 * time.Millisecond
	// DefaultRetentionInterval is the time between two passes.
	DefaultRetentionInterval = time.Minute
	// DefaultRetentionLease is how long a leader's lease lasts unrenewed.
	DefaultRetentionLease = 30 * time.Second
	// MinRetentionLease is the shortest LeaseDuration accepted: shorter
	// leases change hands on an ordinary database hiccup.
	MinRetentionLease = time.Second
	// DefaultVacuumInterval is how often the leader vacuums the partitions
	// of a partitioned outbox table that have dead rows enough.
	DefaultVacuumInterval = 10 * time.Second
)

// RetentionConfig configures a Retention. The zero value is usable: every
// field says its default.
type RetentionConfig struct {
	// Schema holds the outbox tables. Defaults to "public".
	Schema string

	// Table is the outbox table's name; processed-event records are pruned
	// from <Table>_processed. Defaults to "outbox_events".
	Table string

	// RetainPublished is how long a published event is kept after it was
	// published (published_at, by the database's clock) before it is
	// deleted. RetainForever (any negative value) keeps every published
	// event. Defaults to DefaultRetainPublished (7 days). Keep events as
	// long as you may want to replay them. Pending and dead-lettered
	// events are never deleted, whatever their age.
	RetainPublished time.Duration

	// RetainProcessed is how long a processed-event record (the Deduper's
	// <Table>_processed, processed_at) is kept. RetainForever (any
	// negative value) keeps every record. Defaults to
	// DefaultRetainProcessed (30 days). Keep records at least as long as
	// published events, and longer than any transport redelivers: a
	// delivery whose record is gone is applied again. NewRetention warns
	// when it is the shorter of the two.
	RetainProcessed time.Duration

	// BatchSize bounds each DELETE, so a pass never holds many row locks
	// or writes a long burst of WAL. Defaults to 1000.
	BatchSize int

	// BatchPause is the pause after each full batch before the next, so a
	// pass deletes at most about BatchSize rows per BatchPause (10,000
	// rows a second by default) and leaves the database to the relays.
	// Defaults to DefaultRetentionBatchPause (100ms). A negative value
	// means no pause.
	BatchPause time.Duration

	// Interval is the time from the end of one pass to the start of the
	// next, while this Retention leads. A new leader runs a pass at once.
	// Defaults to DefaultRetentionInterval (1 minute).
	Interval time.Duration

	// LeaseDuration is how long the leader's lease lasts without renewal:
	// when the leader dies, another Retention takes over within it. The
	// leader renews every third of it and stops pruning before a lease it
	// could not renew expires (at nine tenths of it). At least
	// MinRetentionLease (1s). Defaults to DefaultRetentionLease (30s).
	LeaseDuration time.Duration

	// PartitionsAhead is, on a partitioned table, how many periods of the
	// outbox table after the current one the leader keeps partitions
	// created for, the processed table's days covering at least as much
	// (PartitionsConfig.Ahead). Defaults to DefaultPartitionsAhead of each
	// table's period.
	PartitionsAhead int

	// PartitionLockTimeout bounds, on a partitioned table, each wait for
	// the lock a partition's attach or detach takes (PartitionsConfig's
	// LockTimeout). Defaults to DefaultPartitionLockTimeout (200ms).
	PartitionLockTimeout time.Duration

	// VacuumInterval is, on a partitioned outbox table, how often the
	// leader vacuums its partitions that hold dead rows enough
	// (Partitions.Vacuum), between its passes: every settled event leaves
	// a dead row in the current period's partition, where the claims
	// read, and autovacuum comes at most once a minute, or not at all
	// where it is off. A negative value leaves them to autovacuum. On a
	// plain table it does nothing. Defaults to DefaultVacuumInterval
	// (10s).
	VacuumInterval time.Duration

	// Holder names this Retention in the lease row, in logs and in
	// Stats. It must be unique among the Retentions sharing a table: a
	// Retention whose Holder holds the lease is taken for the leader.
	// Defaults to "<hostname>-<pid>-<random>". A stable name (a pod's)
	// lets a restarted process take its own unexpired lease back at once.
	Holder string

	// Logger receives a line when this Retention becomes or stops being
	// the leader, one per pass that deleted rows (info), and one per failed
	// pass or lease statement (warn). Defaults to slog.Default() at warn
	// level.
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c RetentionConfig) WithDefaults() RetentionConfig {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.RetainPublished == 0 {
		c.RetainPublished = DefaultRetainPublished
	} else if c.RetainPublished < 0 {
		c.RetainPublished = RetainForever
	}
	if c.RetainProcessed == 0 {
		c.RetainProcessed = DefaultRetainProcessed
	} else if c.RetainProcessed < 0 {
		c.RetainProcessed = RetainForever
	}
	if c.BatchSize == 0 {
		c.BatchSize = defaultPruneBatch
	}
	if c.BatchPause == 0 {
		c.BatchPause = DefaultRetentionBatchPause
	}
	if c.Interval == 0 {
		c.Interval = DefaultRetentionInterval
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultRetentionLease
	}
	if c.VacuumInterval == 0 {
		c.VacuumInterval = DefaultVacuumInterval
	}
	if c.Holder == "" {
		c.Holder = defaultHolder()
	}
	c.Logger = logs.OrDefault(c.Logger)
	return c
}

// maxHolderBytes keeps holder names readable in the lease row and logs.
const maxHolderBytes = 200

func (c RetentionConfig) validate() (names, error) {
	n, err := newNames(c.Schema, c.Table)
	if err != nil {
		return names{}, err
	}
	switch {
	case c.BatchSize < 1:
		return names{}, &core.ConfigError{Field: "BatchSize", Reason: "must be at least 1 (0 means the default, 1000)"}
	case c.Interval < 0:
		return names{}, &core.ConfigError{Field: "Interval", Reason: "must not be negative (0 means the default, 1 minute)"}
	case c.LeaseDuration < MinRetentionLease:
		return names{}, &core.ConfigError{Field: "LeaseDuration", Reason: c.LeaseDuration.String() + " is shorter than " + MinRetentionLease.String() + ": use at least that (0 means the default, 30s)"}
	case len(c.Holder) > maxHolderBytes:
		return names{}, &core.ConfigError{Field: "Holder", Reason: "is " + strconv.Itoa(len(c.Holder)) + " bytes long; the limit is " + strconv.Itoa(maxHolderBytes)}
	}
	if !utf8.ValidString(c.Holder) {
		return names{}, &core.ConfigError{Field: "Holder", Reason: "is not valid UTF-8"}
	}
	for _, r := range c.Holder {
		if r < ' ' || r == 0x7f {
			return names{}, &core.ConfigError{Field: "Holder", Reason: "contains a control character: use printable text"}
		}
	}
	return n, nil
}

// defaultHolder names a Retention after its host and process, with a
// random part so two Retentions of one process differ too.
func defaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}
