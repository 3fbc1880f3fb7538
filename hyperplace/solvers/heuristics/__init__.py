"""Greedy rules (plain, with preemption, with migration) and the warm start from a previous round."""
