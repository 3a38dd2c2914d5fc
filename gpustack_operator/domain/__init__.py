"""Pure functions (no I/O) that turn node facts into labels, names and Kueue objects (SPEC.md)."""
