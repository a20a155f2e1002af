"""Every tool memstream serves. Importing this package registers them all."""

from memstream.api.tools import admin, associations, context, reads, recall, standings, writes  # noqa: F401
