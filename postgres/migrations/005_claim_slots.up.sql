-- Slot claims (see Store.Claim). Relays sharing a table all start their
-- claims at the head of the pending index, and each steps over the rows the
-- others hold leased or locked there: with 8 claimers, 3.5 times as many
-- index entries per claimed event as with 2. Under a backlog a claim
-- therefore takes the oldest due rows of one slot of the pending set: rows
-- are grouped 64 by insertion order, and the groups dealt round 16 slots,
-- so a slot's rows sit together on the heap. The sequence hands the slots
-- out in turn, so concurrent claims rarely share one and every slot is
-- visited every 16 claims. The index costs one more entry per event
-- written; like the pending index it holds only pending rows, and, keyed on
-- insertion order only, leasing the row leaves it a HOT update.
CREATE SEQUENCE IF NOT EXISTS {{.ClaimSlot}};
CREATE INDEX IF NOT EXISTS {{.SlotIndex}} ON {{.Outbox}} (((pos / 64) % 16), available_at, pos)
    WHERE published_at IS NULL AND dead_at IS NULL;
