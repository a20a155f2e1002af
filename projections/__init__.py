"""Read side."""
