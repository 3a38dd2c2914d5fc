"""Pure functions (no I/O) that turn node facts into labels, names and Kueue objects
(docs/architecture.md). Nothing here reads the environment or does I/O.

Module map, in the order of the chain:

- ``labels``, ``validation``, ``names``, ``quantities``: keys, Kubernetes validity rules,
  slugs and quantities shared by everything below.
- ``manufacturers``: the manufacturer registry and its overrides, given as values
  (docs/configuration.md; ``gpustack_operator.environment`` reads them).
- ``devices``: device groups and the device manager's labels
  (docs/device-manager.md, docs/labels.md).
- ``devicesources``: device facts from vendor stacks (GFD, MIG, sharing, the AMD labeller,
  DRA) and their precedence (docs/devices.md).
- ``keys``, ``capacity``: the CPU key and the worker's capacity labels
  (docs/naming.md, docs/labels.md).
- ``nodefeature``: NFD NodeFeature objects and NFD's label merge.
- ``profiles``: profile and LocalQueue names (docs/naming.md).
- ``kueue``: typed Kueue objects with Kueue's limits.
- ``flavors``, ``queues``: ResourceFlavors, Cohorts, ClusterQueues, LocalQueues (docs/worker.md).
- ``kueueconfig``: what the chain needs from Kueue's own configuration (docs/workloads.md).
- ``desired``, ``explain``: the whole chain at once, and why each node feeds what it does
  (docs/plan.md).
"""
