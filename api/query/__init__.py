"""Pure query logic: recall, reconstruct, context packets, the contingent rule."""
