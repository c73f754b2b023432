"""What became of each job kiqbeat pushed (issue 27): the worker protocol's inbox folded into
per-schedule outcome records (`fold_outcomes`, called by every invocation after its pushes),
the reads of those records, and each schedule's `Health`.

The record codec and `Health` are pure (kiqbeat.core.outcomes); this package is their Redis
side. docs/store.md, "The worker protocol", is the contract with the workers.
"""

from kiqbeat.core.outcomes import Health, Outcomes, TickOutcome
from kiqbeat.outcomes.records import fold_outcomes, read_outcomes

__all__ = ["Health", "Outcomes", "TickOutcome", "fold_outcomes", "read_outcomes"]
