"""The examples find scripts/run's server by themselves: ``--token`` defaults to
``$OXIDE_BATCH_TOKEN``, else the ``var/runtime-token`` scripts/run writes, and
is required when neither is there."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def local_server(monkeypatch: pytest.MonkeyPatch, token_file: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "local_server", ROOT / "examples" / "local_server.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "TOKEN_FILE", token_file)
    return module


def parse(module: ModuleType, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.add_server_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_environment_wins_then_the_file(monkeypatch, tmp_path):
    token_file = tmp_path / "runtime-token"
    token_file.write_text("from-file\n", encoding="ascii")
    module = local_server(monkeypatch, token_file)
    monkeypatch.setenv("OXIDE_BATCH_TOKEN", "from-env")
    assert parse(module).token == "from-env"
    monkeypatch.delenv("OXIDE_BATCH_TOKEN")
    assert parse(module).token == "from-file"
    assert parse(module, "--token", "given").token == "given"
    assert parse(module).url == "http://127.0.0.1:8000"


def test_without_any_token_the_option_is_required(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("OXIDE_BATCH_TOKEN", raising=False)
    module = local_server(monkeypatch, tmp_path / "absent")
    with pytest.raises(SystemExit) as stopped:
        parse(module)
    assert stopped.value.code == 2
    assert "--token" in capsys.readouterr().err
