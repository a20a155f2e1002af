"""The Kafka router: the faces of a deployment, routing each call to its agent's worker."""
