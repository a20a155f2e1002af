"""Recall: fusion, the quality gate, and the pipeline that joins them (R1–R13)."""
