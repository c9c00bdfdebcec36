"""The sparse-bench commands, one module each; `bench.cli` registers them on its group."""
