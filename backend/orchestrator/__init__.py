"""The orchestrator: node states, deterministic work assignments, and the sweeper that
ejects members whose heartbeats stopped. Pure parts (`states`, `assignment`) import no
database, Redis or chain client, so they are unit-tested alone."""
