"""A memstream HTTP server for process-level tests: the real app, with the test embedder.

Usage: python tests/procs/serve.py DATA_DIR PORT
"""

from __future__ import annotations

import sys
from pathlib import Path

import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from memstream.api.faces.http import create_app
from memstream.api.services.settings import load_settings
from tests.support.embedders import HashEmbedder

if __name__ == "__main__":
    data_dir, port = sys.argv[1], int(sys.argv[2])
    settings = load_settings(data_dir=Path(data_dir))
    app = create_app(settings, embedder=HashEmbedder(), with_mcp=False)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
