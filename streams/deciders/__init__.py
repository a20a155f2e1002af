"""Deciders: the decision step, and the Kafka worker's decider, its faust app and the commands-topic codec."""
