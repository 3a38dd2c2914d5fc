"""The worker's state and the helpers its reconcilers share: the node-model store,
the shared caches and indexes, the availability tracker, the declarations in force, the
pool queue and the writer (docs/architecture.md, "The house")."""
