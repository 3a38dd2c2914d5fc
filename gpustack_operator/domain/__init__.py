"""Pure functions (no I/O) that turn node facts into labels, names and Kueue objects (SPEC.md).

Module map, in the order of the chain:

- ``labels``, ``validation``, ``names``, ``quantities``: keys, Kubernetes validity rules,
  slugs and quantities shared by everything below.
- ``settings``, ``manufacturers``: ``GPUSTACK_*`` settings and the manufacturer registry
  (docs/configuration.md).
- ``devices``, ``simdevices``: device groups and the device manager's labels
  (docs/device-manager.md, docs/labels.md).
- ``keys``, ``capacity``: the CPU key and the worker's capacity labels
  (docs/naming.md, docs/labels.md).
- ``nodefeature``: NFD NodeFeature objects and NFD's label merge.
- ``profiles``: profile and LocalQueue names (docs/naming.md).
- ``kueue``: typed Kueue objects with Kueue's limits.
- ``flavors``, ``queues``: ResourceFlavors, Cohorts, ClusterQueues, LocalQueues (docs/worker.md).
- ``desired``: the whole chain at once, for ``plan`` and tests.
"""
