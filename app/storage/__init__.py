"""Storage: the schema, the engine and every SQL statement, in SQLAlchemy Core."""
