"""Check service: asks producers about unresolved transactions."""
