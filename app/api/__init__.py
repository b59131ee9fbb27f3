"""HTTP API: thin Flask blueprints over the domain."""
