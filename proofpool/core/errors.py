"""Root of every error proofpool raises on purpose.

The CLI turns any `ProofpoolError` into a one-line message and exit code 1; anything
else is a bug and keeps its traceback.
"""


class ProofpoolError(Exception):
    """An expected failure with a message a user can act on."""


class ConfigError(ProofpoolError):
    """A setting is missing or inconsistent."""


class ServiceUnavailable(ProofpoolError):
    """A service proofpool needs (chain, database, broker, store) cannot be reached."""
