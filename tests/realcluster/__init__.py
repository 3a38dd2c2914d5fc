"""The real-cluster tier: the operator against real etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and Kueue built from their Go modules
(docs/realcluster.md)."""
