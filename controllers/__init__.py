"""The worker's reconcilers, one a module: read the cache, call the domain model, apply."""
