"""The validator's checks as pure functions: bytes + the chain's facts + the pool's rules -> a Verdict.

No Celery, database, chain or store here: `validator/tasks.py` fetches the
inputs and records the verdict; anyone holding the file can re-run `run_checks` and get the same
verdict. See docs/validator-checks.md for the order of the checks and every reason code.
"""

from proofpool.validator.checks.facts import PoolRules, SubmissionFacts
from proofpool.validator.checks.inference import ModelLoader
from proofpool.validator.checks.run import run_checks
from proofpool.validator.checks.verdict import CheckReason, Reason, Verdict

__all__ = ["CheckReason", "ModelLoader", "PoolRules", "Reason", "SubmissionFacts", "Verdict", "run_checks"]
