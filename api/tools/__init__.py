"""Every tool memstream serves. Importing this package registers them all."""

from memstream.api.tools import admin, associations, reads, recall, writes  # noqa: F401
