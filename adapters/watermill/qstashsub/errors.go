package qstashsub

import "errors"

// ErrNoSubscription is the error a delivery fails with when no Subscribe
// call is currently consuming its topic. It is transient, so QStash
// redelivers once a router has subscribed. Match it with errors.Is.
var ErrNoSubscription = errors.New("qstashsub: no subscription for the delivery's topic")
