package postgres

// GetKeysSQL is the statement GetCounters runs for a Query with Keys.
func (s *Store) GetKeysSQL() string { return s.q.getKeys }
