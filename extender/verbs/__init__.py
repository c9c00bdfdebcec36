"""The extender's verbs, one module each (as scheduler-plugins keeps one plugin per folder).

Each module exposes ``run(scheduler, args)``; ``extender.service.Scheduler`` owns the state
they share (the cached cluster view, pending demands, observers) and calls them.
"""
