"""Helpers the tests share: embedders, servers, faces, the broker and Kafka deployments."""
