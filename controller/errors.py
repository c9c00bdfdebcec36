"""Errors the reconciler understands, raised by the I/O adapters (no I/O library here)."""


class GangError(RuntimeError):
    """The extender could not be asked or refused the request (not: 'does not fit')."""


class PodCreateError(RuntimeError):
    """The API server refused a worker pod (admission policy, quota, ...)."""
