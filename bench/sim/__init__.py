"""Trace simulator driving the extender's placement core and ledger rules unchanged."""
