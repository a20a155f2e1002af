"""Every tool memstream serves. Importing this package registers them all."""

from memstream.api.tools import (  # noqa: F401
    admin,
    agents,
    associations,
    context,
    erasure,
    fleet,
    graph,
    reads,
    recall,
    standings,
    transfer,
    writes,
)
