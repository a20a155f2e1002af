"""Services the tools use: the engine, embedders, access control, settings, metrics."""
