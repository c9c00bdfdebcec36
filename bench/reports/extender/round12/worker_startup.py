"""CPU of the share price worker's start-up (spawn and imports), three times:
PYTHONPATH=. python bench/reports/extender/round12/worker_startup.py"""

from __future__ import annotations

import resource

from extender.placement.policies.sparse import DEFERRED
from extender.pricesolver import PriceSolver


class Policy:
    price_solve = DEFERRED

    def price_job(self) -> None:
        return None


if __name__ == "__main__":
    for _ in range(3):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        solver = PriceSolver(Policy())
        solver.start()
        solver._warming.result(timeout=120)  # type: ignore[union-attr]
        solver.close()  # waits for the worker: its CPU is then in RUSAGE_CHILDREN
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
        print(f"worker start-up and imports: {cpu:.2f} s CPU")
