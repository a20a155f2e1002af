"""Pure tests: no disk, engine, servers, subprocesses or sockets (conftest.py refuses the fixtures
that do I/O); the fast tier (`make test-fast`)."""
