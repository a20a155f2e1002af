"""Tests that start processes or servers: crash, faults, load, fuzz, browser, backup, CLI."""
