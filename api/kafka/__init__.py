"""Kafka mode's two processes: the router and the worker."""
