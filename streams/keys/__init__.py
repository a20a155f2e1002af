"""Data keys for crypto-shredding: the key store port, its SQLite adapter and the master key."""
