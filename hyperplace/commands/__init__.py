"""Command groups of the ``hyperplace`` CLI, one module each, wired by :mod:`hyperplace.cli`.

Each module parses options, calls the library and prints; no solving logic lives here.
"""
