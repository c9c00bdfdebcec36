"""Scheduling throughput through the real kube-scheduler and API server, with and without the
extender (stock scheduler on whole GPUs as the baseline), on fake GPU nodes."""
