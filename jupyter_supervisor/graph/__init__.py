"""The graph backend: the Supervisor (TF1 graph code), its services and replicas."""
