"""Workflows that call the driver: preemption, defragmentation, repair, placement sessions."""
