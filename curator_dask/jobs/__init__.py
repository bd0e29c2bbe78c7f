"""Job directories: event log, job summary, resume tokens (work in progress, see issue 5)."""
