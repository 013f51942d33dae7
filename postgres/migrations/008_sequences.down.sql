DROP TABLE IF EXISTS {{.SequenceParked}};
DROP TABLE IF EXISTS {{.SequenceGaps}};
DROP TABLE IF EXISTS {{.Sequences}};
