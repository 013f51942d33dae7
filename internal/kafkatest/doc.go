// Package kafkatest runs Kafka-protocol clusters for outboxkit's tests:
// franz-go's kfake, several brokers in the test process, whose brokers a
// test can kill (listener closed, every open connection cut, partition
// leadership moved to the survivors) and start again on the same port, and
// a consumer that collects every record of a topic. No Kafka broker
// package is needed.
package kafkatest
