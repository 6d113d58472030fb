"""What the scheduler tells the apps above it, which connect in their AppConfig.ready: the scheduler imports none
of them (docs/architecture.md#layers)."""
from django.dispatch import Signal

# Sent inside the transaction that ended them: `runs` (JobRuns, saved with ended_at and outcome) and `now` (a
# datetime, or None for the current time). Profiling summarises them, so a run's profile joins its task's history
# at once.
runs_ended = Signal()
