"""Kafka tests: they need the local broker (infra/kafka-local.sh)."""
