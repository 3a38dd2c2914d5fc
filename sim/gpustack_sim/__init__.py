"""The simulated Kubernetes cluster: a test double and a demo, never a production cluster.

- ``apiserver``: the generic kube-apiserver double (store, watches, validation, admission,
  RBAC, discovery, TLS, the built-in garbage collector);
- ``standins``: stand-ins for other projects' controllers (Kueue, NFD-master, the scheduler,
  the kubelet, Deployments, ServiceAccounts), one module each;
- ``cluster``: a whole cluster in one process (the double, the stand-ins, the agents, the
  worker), for ``gpustack-operator sim``, tests and benchmarks.
"""
