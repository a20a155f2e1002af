"""The console: a web page for operators at ``/`` (docs/console.md). ``routes`` serves the page,
its assets and, in ACL mode, its login; the page itself (``static/``) calls the tools and the
change feed like any client, as the logged-in client."""
