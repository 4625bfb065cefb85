"""Problems → the repository's typed errors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oxide_batch.client.wire import (
    ERROR_ENTRY_MEMBERS,
    INVALID_REQUEST,
    PROBLEM_MEMBERS,
    error_fields,
)
from oxide_batch.domain.descriptor import RepositoryCapability
from oxide_batch.domain.errors import OxideBatchError, error_classes, rebuild_error


class ApiError(Exception):
    """A problem with no typed error of the repository behind it (401, 403, 404 of a
    route, 405, 413, 415, …): the HTTP status, the problem's code and the document."""

    def __init__(self, status: int, code: str, detail: str, problem: Mapping[str, Any]) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.problem = dict(problem)


class InvalidRequest(ApiError):
    """400 ``invalid_request`` that is not exactly one rebuildable domain error (a
    shape error, several fields): ``errors`` maps each field path to its entries
    (``{code, message, …}``)."""

    def __init__(
        self, errors: Mapping[str, list[Mapping[str, Any]]], detail: str, problem: Mapping[str, Any]
    ) -> None:
        super().__init__(400, INVALID_REQUEST, detail, problem)
        self.errors = {path: [dict(entry) for entry in found] for path, found in errors.items()}


def _rebuild(code: str, fields: dict[str, Any]) -> OxideBatchError | None:
    if code not in error_classes():
        return None
    if code == "unsupported_capability" and isinstance(fields.get("capability"), str):
        # rebuild_error converts BatchStatus fields only; this one is a capability.
        try:
            fields = {**fields, "capability": RepositoryCapability(fields["capability"])}
        except ValueError:
            return None
    try:
        return rebuild_error(code, fields)
    except (TypeError, ValueError, AttributeError):
        return None


def error_from_problem(status: int, problem: Mapping[str, Any]) -> Exception:
    """The exception a problem document stands for."""
    code = str(problem.get("code", "unknown"))
    detail = str(problem.get("detail", ""))
    if code == INVALID_REQUEST:
        errors = problem.get("errors") or {}
        entries = [entry for found in errors.values() for entry in found]
        if len(entries) == 1 and isinstance(entries[0], Mapping):
            entry = entries[0]
            rebuilt = _rebuild(str(entry.get("code")), error_fields(entry, ERROR_ENTRY_MEMBERS))
            if rebuilt is not None:
                return rebuilt
        return InvalidRequest(errors, detail, problem)
    fields = error_fields(problem, PROBLEM_MEMBERS)
    replayed = fields.pop("replayed", False) is True
    rebuilt = _rebuild(code, fields)
    if rebuilt is not None:
        if replayed:
            # A recorded refusal answered again (an operator endpoint's replay).
            rebuilt.replayed = True  # type: ignore[attr-defined]
        return rebuilt
    return ApiError(status, code, detail, problem)
