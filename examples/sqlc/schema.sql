-- The business table. outboxkit's tables are not here: sqlc generates
-- code for the service's own queries, and store.Add writes the outbox.
CREATE TABLE orders (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  customer    text NOT NULL,
  total_cents bigint NOT NULL,
  status      text NOT NULL DEFAULT 'placed'
);
