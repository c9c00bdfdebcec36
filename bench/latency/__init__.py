"""Extender latency benchmark: filter + prioritize on a 5,000-node x 8-GPU cluster against a
null aiohttp server that only parses and echoes, measured in the same run."""
