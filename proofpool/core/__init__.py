"""The core: pure, deterministic code every role shares (no I/O, no services)."""
