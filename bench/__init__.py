"""sparse-bench: trace-driven benchmarks of the extender's placement core (see bench/README.md)."""
