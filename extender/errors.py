"""Domain errors. Each names the HTTP status the HTTP layer maps it to; no aiohttp import here."""


class SparseError(Exception):
    """Base class of every error the extender understands."""

    http_status = 500


class InvalidRequest(SparseError):
    """Malformed or hostile request body (HTTP 400)."""

    http_status = 400


class InvalidInventory(SparseError):
    """A GPU inventory file or Node annotation that cannot be used."""

    http_status = 400


class InvalidDemand(SparseError):
    """A pod whose GPU request cannot be understood (bad quantity, milli out of range...)."""

    http_status = 400


class ReservationConflict(SparseError):
    """A reservation would over-commit a GPU or collides with an existing one (HTTP 409)."""

    http_status = 409

    def __init__(self, message: str, gpu_uuid: str | None = None) -> None:
        super().__init__(message)
        self.gpu_uuid = gpu_uuid


class LedgerUnavailable(SparseError):
    """The ledger's store cannot be reached in time (Redis down, frozen, failing over). Verbs
    answer the protocol's ``Error`` so the scheduler retries; ``/readyz`` turns 503."""

    http_status = 503


class LedgerBusy(LedgerUnavailable):
    """Every connection to the store stayed busy for the whole wait: the replica is loaded, the
    store is fine (answered as Error; readiness unchanged)."""


class PayloadTooLarge(InvalidRequest):
    """A body over the size limit, before or after decompression (HTTP 413)."""

    http_status = 413


class RequestTimeout(InvalidRequest):
    """A body that did not arrive in time (HTTP 408): a slow sender holds no slot for long."""

    http_status = 408


class UnsupportedEncoding(InvalidRequest):
    """A Content-Encoding the extender does not decode (HTTP 415)."""

    http_status = 415


class Overloaded(SparseError):
    """Too much work in flight on this replica: answered as the verb's Error so the scheduler
    retries (another replica, or this one a moment later)."""

    http_status = 503
