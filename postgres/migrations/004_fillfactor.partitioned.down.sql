-- Nothing to revert: the partitioned layout's partitions keep their
-- fillfactor (40) until they are dropped.
SELECT 1;
