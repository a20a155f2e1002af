"""The Kafka worker: decides its partitions' writes and holds their read models."""
