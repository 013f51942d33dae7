DROP TABLE IF EXISTS {{.Processed}};
