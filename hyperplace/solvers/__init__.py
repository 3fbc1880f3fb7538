"""Solvers: backends that encode a formulation (cpsat, milp), greedy rules, exact special cases."""
