-- name: CreateOrder :one
INSERT INTO orders (customer, total_cents) VALUES ($1, $2) RETURNING id;

-- name: MarkPaid :execrows
UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'placed';

-- name: CountOrders :one
SELECT count(*) FROM orders;
