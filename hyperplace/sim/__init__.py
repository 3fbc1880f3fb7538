"""Scheduling over time: a round loop, trace replay with failures, and what-if sweeps.

* :mod:`~hyperplace.sim.loop`: :class:`RoundLoop`, the clock-free state across rounds a
  controller would call.
* :mod:`~hyperplace.sim.simulator`: event-driven replay driving the loop.
* :mod:`~hyperplace.sim.policies`: the engine and the peers' queueing disciplines.
* :mod:`~hyperplace.sim.speed`: placement-dependent job speed (GPU type, network).
* :mod:`~hyperplace.sim.failures`: failures with Meta's Llama 3 causes and rate.
* :mod:`~hyperplace.sim.traces`, :mod:`~hyperplace.sim.workload`: traces and job mapping.
* :mod:`~hyperplace.sim.metrics`: per-policy metrics and output.
* :mod:`~hyperplace.sim.run`: one call from trace to result (what the CLI uses).
"""
