"""Where the examples find the server they talk to: ``--url`` (default the
``scripts/run`` address) and ``--token``, by default ``$OXIDE_BATCH_TOKEN`` or
the runtime token ``scripts/run`` writes to ``var/runtime-token``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

TOKEN_FILE = Path(__file__).resolve().parents[1] / "var" / "runtime-token"


def default_token() -> str | None:
    token = os.environ.get("OXIDE_BATCH_TOKEN", "").strip()
    if token:
        return token
    if TOKEN_FILE.is_file():
        return TOKEN_FILE.read_text(encoding="ascii").strip() or None
    return None


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    token = default_token()
    parser.add_argument("--url", default=os.environ.get("OXIDE_BATCH_URL", "http://127.0.0.1:8000"))
    parser.add_argument(
        "--token",
        default=token,
        required=token is None,
        help="a batch-runtime user's API token (default: $OXIDE_BATCH_TOKEN, else the "
        "var/runtime-token that scripts/run writes)",
    )
