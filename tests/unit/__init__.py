"""Pure tests: no servers, no subprocesses, no sockets; the fast tier (`make test-fast`)."""
