"""Infrastructure adapters: settings, chain, object store, checkpoints, HTTP, broker, database."""
