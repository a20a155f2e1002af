"""Command buses: how a write reaches its decider, embedded and over Kafka."""
