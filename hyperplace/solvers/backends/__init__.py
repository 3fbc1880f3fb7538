"""Exact backends behind one ABC: CP-SAT, HiGHS (via PuLP) and the LP-relaxation bound."""
