"""Integration tests that need real services (a Kafka broker: see infra/kafka-local.sh)."""
