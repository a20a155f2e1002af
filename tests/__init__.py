"""memstream test suite: tiers (unit, contract, system, kafka) and their shared support package."""
