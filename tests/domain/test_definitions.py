"""Manifests and upgrade edges (contract §2.2.3, §2.2.4)."""

from __future__ import annotations

import pytest

from oxide_batch.domain.definitions import (
    LEGACY_MANIFEST,
    Manifest,
    UpgradeEdge,
    legacy_manifest,
)
from oxide_batch.domain.errors import (
    DefinitionJobMismatch,
    InvalidManifest,
    InvalidUpgradeEdge,
    UnsupportedManifestVersion,
)

A, B = "a" * 64, "b" * 64


def test_the_digest_is_sha256_of_the_canonical_bytes():
    manifest = Manifest.canonicalise({"job": "j", "format": 1}, job_name="j")
    assert manifest.text == '{"format":1,"job":"j"}'
    import hashlib

    assert manifest.digest == hashlib.sha256(b'{"format":1,"job":"j"}').hexdigest()


@pytest.mark.parametrize("format_", [1, 2, 3])
def test_formats_1_to_3_are_understood(format_):
    body = {"format": format_, "job": "j"}
    if format_ > 1:
        body |= {"entry": "s", "nodes": [{"id": "s", "kind": "step"}], "transitions": []}
    assert Manifest.canonicalise(body, job_name="j").format == format_


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"format": 4, "job": "j"}, UnsupportedManifestVersion),
        ({"format": "1", "job": "j"}, UnsupportedManifestVersion),
        ({"format": True, "job": "j"}, UnsupportedManifestVersion),
        ({"job": "j"}, UnsupportedManifestVersion),
        ({"format": 1, "job": "k"}, DefinitionJobMismatch),
        ({"format": 1}, InvalidManifest),
        ({"format": 1, "job": "j", "x": 1.5}, InvalidManifest),
        ([1], InvalidManifest),
    ],
)
def test_unusable_manifests_are_refused(body, error):
    with pytest.raises(error):
        Manifest.canonicalise(body, job_name="j")


def test_the_legacy_manifest_is_fixed():
    assert legacy_manifest().text == (
        '{"format":1,"repository_port":"m1","revision":"__m1_repository_port_v1"}'
    )
    assert legacy_manifest().job_name is None
    assert LEGACY_MANIFEST["format"] == 1


def test_an_edge_sorts_its_mapping_and_finds_sources():
    edge = UpgradeEdge.of(
        job_name="j", key="k", from_digest=A, to_digest=B, step_mapping={"z": "y", "a": "b"}
    )
    assert edge.step_mapping == (("a", "b"), ("z", "y"))
    assert edge.mapping_json() == '{"a":"b","z":"y"}'
    assert edge.source_for("y") == "z"
    assert edge.source_for("nope") is None


@pytest.mark.parametrize(
    ("mapping", "from_digest"),
    [
        ({}, A),
        ({"a": "x", "b": "x"}, A),
        ({"a": "b"}, B),
        ({"": "b"}, A),
        ({"a": " b"}, A),
    ],
    ids=["empty", "two-sources-one-target", "self-edge", "empty-step", "padded-step"],
)
def test_malformed_edges_are_refused(mapping, from_digest):
    with pytest.raises(InvalidUpgradeEdge):
        UpgradeEdge.of(
            job_name="j", key="k", from_digest=from_digest, to_digest=B, step_mapping=mapping
        )
