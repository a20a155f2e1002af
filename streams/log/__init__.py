"""The log: its port, and the embedded (SQLite) and Kafka adapters."""
