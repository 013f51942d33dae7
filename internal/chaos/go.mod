module github.com/outboxkit/outboxkit/internal/chaos

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.12.0
	github.com/outboxkit/outboxkit v0.0.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/outboxkit/outboxkit/adapters/kafka v0.0.0
	github.com/outboxkit/outboxkit/internal/kafkatest v0.0.0
	github.com/twmb/franz-go v1.22.3
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

replace github.com/outboxkit/outboxkit => ../..

replace github.com/outboxkit/outboxkit/adapters/kafka => ../../adapters/kafka

replace github.com/outboxkit/outboxkit/internal/kafkatest => ../../internal/kafkatest
