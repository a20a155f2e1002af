"""The ``memstream`` command: the composition root that starts every face and process."""
