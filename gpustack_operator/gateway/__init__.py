"""worker-gateway: one read-only HTTP API over the managed Kueue objects of many clusters.

``config`` parses the cluster list, ``kinds`` names the watched Kueue kinds, ``pools`` turns a
ClusterQueue into a pool entry (pure), ``hub`` fans events out to bounded per-client buffers,
``cluster`` runs one cluster's informers and tracks its health, ``gateway`` holds the set of
clusters, ``api`` is the aiohttp application and ``server`` runs it all.
"""
