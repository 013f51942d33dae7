DROP INDEX IF EXISTS {{.Schema}}.{{.AggregateIndex}};
DROP TABLE IF EXISTS {{.Aggregates}};
