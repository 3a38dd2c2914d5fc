"""The Kueue chain built from node models: flavors, Cohorts, ClusterQueues and
LocalQueues, topologies, teams, tenants and declared pools, and why a node feeds the
pools it does (docs/architecture.md, "The house")."""
