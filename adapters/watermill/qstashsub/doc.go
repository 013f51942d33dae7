// Package qstashsub lets a Watermill Router consume outbox events delivered
// by Upstash QStash: Subscriber is at once the message.Subscriber the Router
// reads and the http.Handler of the endpoint QStash delivers to.
//
//	sub, err := qstashsub.New(&qstashsub.Config{
//		CurrentSigningKey: os.Getenv("QSTASH_CURRENT_SIGNING_KEY"),
//		NextSigningKey:    os.Getenv("QSTASH_NEXT_SIGNING_KEY"),
//		URL:               "https://orders.example.com/qstash/events",
//		ContextFor:        tracing.NewExtractor(), // handlers continue the producer's trace
//	})
//	...
//	http.Handle("POST /qstash/events", sub)
//	router.AddConsumerHandler("shipping", "order.placed", sub, ship)
//
// Every delivery is verified as qstash.Receiver verifies it (strict
// signature, replay guard, event read from the signed body); Ack answers
// 200, Nack answers 500 so QStash retries. The topic of a delivery is the
// event's Type unless Config.Topic says otherwise. Messages are the ones
// outboxwatermill.MessageFromEvent builds, so outboxwatermill.EventFromMessage
// turns them back into events for a core.Deduper.
//
// It is a package of its own so that a program relaying to NATS or AMQP
// with the outboxwatermill package imports no QStash code. Its name is not
// qstash because its users import outboxkit's qstash package beside it
// (qstash.DeliveryFromContext, qstash.Decision), and not watermill because
// they import Watermill's.
//
// Choose it when events travel through QStash (serverless consumers,
// another network, no broker port to open); outboxwatermill.OutboxSubscriber
// reads straight from the outbox store instead.
package qstashsub
