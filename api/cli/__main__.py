"""``python -m memstream.api.cli``: the ``memstream`` command."""

from memstream.api.cli.commands import main

main()
