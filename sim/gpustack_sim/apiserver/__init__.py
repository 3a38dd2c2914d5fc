"""A simulated Kubernetes API server: a test double and a demo, never a production cluster."""
