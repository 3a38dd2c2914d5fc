"""The per-node agent: accelerator detection and NodeFeature reporting (SPEC.md §4)."""
