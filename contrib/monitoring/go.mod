module github.com/outboxkit/outboxkit/contrib/monitoring

go 1.26.0

require github.com/outboxkit/outboxkit v0.0.0

replace github.com/outboxkit/outboxkit => ../..
