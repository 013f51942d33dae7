package postgres

// Test hooks: the external tests EXPLAIN the statements the store runs.

func (s *Store) ClaimSQLForTest() string        { return s.claimSQL }
func (s *Store) PublishSQLForTest() string      { return s.publishSQL }
func (s *Store) SettleSQLForTest() string       { return s.settleSQL }
func (s *Store) PruneSQLForTest() string        { return s.pruneSQL }
func (s *Store) AddSQLForTest() string          { return s.addSQL }
func (s *Store) DeleteSQLForTest() string       { return s.deleteSQL }
func (s *Store) SettleDeleteSQLForTest() string { return s.settleDeleteSQL }
