"""Helpers used only by the bench (``bench/``) and its tests: the peer cases that the bundled
``peer-*`` instances are generated from, and the plan metrics the bench compares plans with."""
