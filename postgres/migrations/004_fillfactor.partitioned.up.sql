-- The partitioned layout's partitions are created with fillfactor 40
-- (migration 001 and postgres.Partitions): a partitioned table itself
-- stores nothing and takes no storage parameters.
SELECT 1;
