"""Tests that start processes or servers (crash, faults, load, fuzz, browser, backup, CLI) or
do I/O in-process: an engine on a temporary data directory, snapshots and files on disk."""
