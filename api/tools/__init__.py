"""Every tool memstream serves. Importing this package registers them all."""

from memstream.api.tools import admin, associations, context, fleet, reads, recall, standings, writes  # noqa: F401
