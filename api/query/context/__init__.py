"""Context answers built on recall: token-budgeted packages (seed 001) and know/miss packets (seed 002)."""
