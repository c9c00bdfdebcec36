"""The inputs of sparse's costs that change now and then, and where they change: the learned
mix's fragmentation model (re-read every few hundred pods) and the share price table solved
from it (``share_price.py``). Pure; a mixin of ``Sparse`` (``sparse.py`` says what each mode
is for).

``price_solve``: INLINE solves a re-read mix's table in the first request that needs it;
DEFERRED leaves the solve to the caller (``price_job``, ``install_prices``; the extender's
``extender.pricesolver``). ``renew``: INLINE takes a re-read mix into use at once; PREPARED
stages the mix and its table (``pending``) until the caller ``adopt``s them together (the
extender's ``extender.verbs.renewal``, once its caches are priced for them).
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.placement.policies.fgd import FGD, FragModel
from extender.placement.policies.share_price import PriceJob, PriceTable, solve
from extender.placement.state import ClusterState

INLINE, DEFERRED = "inline", "deferred"  # where the price term's value tables are solved
PRICE_SOLVES = (INLINE, DEFERRED)
PREPARED = "prepared"  # a re-read mix and a solved table wait for the caller (``adopt``)
RENEWALS = (INLINE, PREPARED)


@dataclass(frozen=True, eq=False)
class PolicyInputs:
    """The global inputs sparse's costs read that change now and then: the fragmentation
    model of the learned mix and the share price table (None: none solved). Compared by
    identity: one object per change."""

    model: FragModel
    table: PriceTable | None

    def warm(self, state: ClusterState) -> None:
        """What the model computes once for every node (its per-node aggregates)."""
        self.model.state_aggregates(state)


class ChangingInputs:
    """The model, the table and the inputs waiting to be adopted, kept by the policy in
    ``_frag`` (its FGD), ``_value`` ("table", "job") and ``_next`` ("model", "table",
    "inputs"); ``price_weight``, ``price_solve`` and ``renew`` are the policy's settings."""

    _frag: FGD
    _value: dict
    _next: dict
    price_weight: float
    price_solve: str
    renew: str

    def pending(self) -> PolicyInputs | None:
        """The inputs the policy will price with once adopted, one object until they change:
        a re-read mix's model with its own price table, so the two are taken into use
        together (deferred solves: None until the table is installed; inline: solved here),
        or a new table alone; None when none wait."""
        inputs: PolicyInputs | None = self._next.get("inputs")
        if (inputs is not None and self.price_weight
                and (inputs.table is None or inputs.table.job.model is not inputs.model)):
            if self.price_solve == DEFERRED:
                return None  # the new mix's table is still being solved
            self._stage("table", solve(self._job(inputs.model)))  # inline: here, once
            inputs = self._next["inputs"]
        return inputs

    def adopt(self, inputs: PolicyInputs) -> bool:
        """Price with ``inputs`` (from ``pending``) from now on; False, and nothing changes,
        when newer inputs superseded them."""
        if inputs is not self._next.get("inputs"):
            return False
        self._next.clear()
        self._frag.model = inputs.model
        if inputs.table is not None:
            self._value["table"] = inputs.table
        return True

    def _stage(self, name: str, value: object) -> None:
        self._next[name] = value
        self._next["inputs"] = PolicyInputs(self._next.get("model", self._frag.model),
                                            self._next.get("table", self._value.get("table")))

    def _model_ahead(self) -> FragModel:
        """The model the next inputs will have: a staged one, else the one in use."""
        return self._next.get("model", self._frag.model)

    def _price_table(self) -> PriceTable:
        """The value table to price with: inline, the current mix's (solved here by the first
        share pod after a re-read, warm-started from the last mix's packings); deferred, the
        last one installed, whatever mix it was solved for."""
        table: PriceTable | None = self._value.get("table")
        if table is None or (self.price_solve == INLINE
                             and table.job.model is not self._frag.model):
            table = self._solve_prices()
        return table

    def _solve_prices(self) -> PriceTable:
        """Solve the current mix's table now and use it."""
        table = solve(self._job())
        self._value["table"] = table
        return table

    def _job(self, model: FragModel | None = None) -> PriceJob:
        model = self._frag.model if model is None else model
        job: PriceJob | None = self._value.get("job")
        if job is None or job.model is not model:
            last: PriceTable | None = self._value.get("table")
            job = PriceJob(model, model.tasks, last.packings if last is not None else ())
            self._value["job"] = job
        return job

    def price_job(self) -> PriceJob | None:
        """Deferred: the solve the current mix needs (one object per mix, so a caller can
        tell a new job from one it runs already; ``renew=PREPARED``: the mix waiting to be
        adopted); None when the table in use (or waiting) is that mix's, or the policy
        solves its own tables."""
        if not self.price_weight or self.price_solve != DEFERRED:
            return None
        model = self._model_ahead()
        table: PriceTable | None = self._next.get("table", self._value.get("table"))
        if table is not None and table.job.model is model:
            return None
        return self._job(model)

    def install_prices(self, table: PriceTable) -> bool:
        """Price with ``table`` (solved elsewhere from ``price_job``) from now on, or, with
        ``renew=PREPARED``, once it is adopted; False, and nothing changes, when the mix was
        re-read since its job was made (a newer job supersedes it)."""
        if table.job.model is not self._model_ahead():
            return False
        if self.renew == INLINE:
            self._value["table"] = table
        else:
            self._stage("table", table)
        return True
