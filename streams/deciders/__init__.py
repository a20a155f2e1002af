"""Deciders: the step that turns commands into events, and the Kafka worker that runs it."""
