"""Admin tools that move memories between agents and stores (export, import, merge); importing registers them."""

from memstream.api.tools.transfer import registration  # noqa: F401
