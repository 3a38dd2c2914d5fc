"""A whole simulated cluster in one process, for ``sim --cluster``, tests and benchmarks.

It composes the simulated API server (``gpustack_sim.apiserver``) with everything a real
cluster would run around the operator: the NFD-master stand-in, a kubelet stand-in that
publishes simulated cards as ``status.allocatable``, one device-manager agent per node with
``sim.gpustack.ai/devices``, and the worker itself. A test double and a demo, never a
production cluster.
"""
