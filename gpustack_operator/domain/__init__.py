"""Pure functions (no I/O) that turn node facts into labels, names and Kueue objects (SPEC.md).

Module map, in the order of the chain:

- ``labels``, ``validation``, ``names``, ``quantities``: keys, Kubernetes validity rules,
  slugs and quantities shared by everything below.
- ``settings``, ``manufacturers``: ``GPUSTACK_*`` settings and the manufacturer registry (§4.1).
- ``devices``, ``simdevices``: device groups and the device manager's labels (§4.2-4.3).
- ``keys``, ``capacity``: the CPU key and the worker's capacity labels (§5).
- ``nodefeature``: NFD NodeFeature objects and NFD's label merge.
- ``profiles``: profile and LocalQueue names (§6.1).
- ``kueue``: typed Kueue objects with Kueue's limits.
- ``flavors``, ``queues``: ResourceFlavors, Cohorts, ClusterQueues, LocalQueues (§6.2-6.5).
- ``desired``: the whole chain at once, for ``plan`` and tests.
"""
