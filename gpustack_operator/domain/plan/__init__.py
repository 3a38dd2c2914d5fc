"""The whole chain offline: the one chain policy, the desired state of a cluster and
``plan``'s composition of it (docs/architecture.md, "The house")."""
