"""Declared associations on the write side: the index the decider consults and the pure decider."""
