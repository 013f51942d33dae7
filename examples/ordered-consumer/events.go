package main

// The status events of an order, in the order the producer writes them.
// The store gives each its order's next sequence, so placed is 1 and
// delivered is 4.
const (
	typePlaced    = "order.placed"
	typePaid      = "order.paid"
	typeShipped   = "order.shipped"
	typeDelivered = "order.delivered"
)

// statuses lists the steps with the status name both services store.
var statuses = []struct{ eventType, status string }{
	{typePlaced, "placed"},
	{typePaid, "paid"},
	{typeShipped, "shipped"},
	{typeDelivered, "delivered"},
}

type orderPlaced struct {
	OrderID    int64 `json:"order_id"`
	TotalCents int64 `json:"total_cents"`
}

type orderPaid struct {
	OrderID int64 `json:"order_id"`
	Cents   int64 `json:"cents"`
}

type orderShipped struct {
	OrderID int64  `json:"order_id"`
	Carrier string `json:"carrier"`
}

type orderDelivered struct {
	OrderID int64 `json:"order_id"`
}

// statusPayload is the payload of step (an index into statuses) for order id.
func statusPayload(step int, id int64) any {
	switch step {
	case 0:
		return orderPlaced{OrderID: id, TotalCents: 1000 + id}
	case 1:
		return orderPaid{OrderID: id, Cents: 1000 + id}
	case 2:
		return orderShipped{OrderID: id, Carrier: []string{"dhl", "ups", "post"}[id%3]}
	default:
		return orderDelivered{OrderID: id}
	}
}
