"""Chaos and fuzz suites: short forms run with the unit tests, long forms behind `make chaos`."""
