"""The per-node agent: accelerator detection and NodeFeature reporting (docs/device-manager.md)."""
