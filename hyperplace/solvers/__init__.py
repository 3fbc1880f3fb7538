"""Solvers, by layer (each imports only the ones above it in this list):

``params``       tunables of every solver and of the driver's budget.
``backends/``    exact backends behind one ABC (``backend``): CP-SAT (``cpsat``), HiGHS via
                 PuLP (``milp``) and the LP-relaxation bound (``relax``).
``heuristics/``  greedy rules (``greedy``; the round extensions' greedy steps
                 ``greedy_preempt``, ``greedy_migrate``, ``greedy_repair``, registered by
                 family in ``families``; ``stop_sets``) and the warm start from a previous
                 round (``warm``).
``driver``       ``solve_placement``: the budgeted orchestrator of heuristics and backends.
``workflows/``   what calls the driver: preemption, defragmentation, repair, sessions.
``split/``       the layer-split solvers (a separate problem).
"""
