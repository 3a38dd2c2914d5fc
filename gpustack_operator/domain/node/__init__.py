"""What one Node is: its raw reads made into profiles, capacity labels, devices,
lifecycle signals, topology group and dedication taints, and the node model that holds
them, built once per Node version (docs/architecture.md, "The house")."""
