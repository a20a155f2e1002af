"""Reconstruct: assembling recall items from the candidate pool (A4, A5)."""
