"""A failure's detail: the exception's type, message and traceback, bounded,
sanitised and scrubbed (contract §2, "Failure detail"; decisions 300-306).

The failure summary (category + failure id) stays what it is; the detail sits
beside it, under the deployment's control (``OXIDE_BATCH_FAILURE_DETAIL``), in
a table of its own. :func:`kept_detail` is the one rule of what is stored:

1. sanitise: a control character other than a newline or a tab (in the type:
   any) becomes U+FFFD, ``\\r\\n`` becomes ``\\n`` — a runtime reporting a failure
   must never be refused for what its exception said;
2. scrub the whole text as sent (:mod:`oxide_batch.domain.scrub`), so that no
   secret can survive by being cut in half;
3. cut it to its bound in UTF-8 bytes, at a character boundary, marked with
   ``… [truncated N bytes]`` (the bound includes the marker).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any

from oxide_batch.domain.scrub import Scrubber

# Bounds in UTF-8 bytes of what is stored, the truncation marker included.
TYPE_MAX_BYTES = 200
MESSAGE_MAX_BYTES = 2048
TRACEBACK_MAX_BYTES = 16384

TRUNCATION_MARKER = re.compile(r"… \[truncated [0-9]+ bytes\]\Z")


class DetailLevel(enum.StrEnum):
    """How much of a failure's detail a deployment keeps."""

    OFF = "off"
    MESSAGE = "message"  # type and message (the default)
    TRACEBACK = "traceback"  # type, message and traceback


@dataclass(frozen=True)
class FailureDetail:
    """What a runtime said about a failure, or what was kept of it. Each member
    is optional; ``*_truncated`` says a member was cut to its bound (by the
    server or by the runtime that sent it)."""

    type: str | None = None
    message: str | None = None
    traceback: str | None = None
    type_truncated: bool = False
    message_truncated: bool = False
    traceback_truncated: bool = False

    @property
    def first_line(self) -> str:
        """The message's first line ('' without one): what a list shows."""
        return (self.message or "").split("\n", 1)[0]

    def as_json(self) -> dict[str, str]:
        """The members a runtime sends (``None`` ones left out)."""
        members = {"type": self.type, "message": self.message, "traceback": self.traceback}
        return {name: value for name, value in members.items() if value is not None}


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTROL_OR_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def sanitized(text: str, *, single_line: bool = False) -> str:
    """``text`` with ``\\r\\n`` as ``\\n`` and every other control character (a
    newline or a tab too when ``single_line``), NUL and lone surrogates as U+FFFD."""
    text = text.replace("\r\n", "\n")
    return (_CONTROL_OR_LINE if single_line else _CONTROL).sub("\ufffd", text)


def truncated(text: str, max_bytes: int) -> tuple[str, bool]:
    """``text`` within ``max_bytes`` UTF-8 bytes: as it is, or cut at a character
    boundary and ended with ``… [truncated N bytes]`` (N: the bytes cut off)."""
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= max_bytes:
        return text, False
    # Room for the marker with the largest N it can name.
    reserve = len(f"… [truncated {len(encoded)} bytes]".encode())
    kept = encoded[: max(0, max_bytes - reserve)].decode("utf-8", "ignore")
    cut = len(encoded) - len(kept.encode("utf-8", "surrogatepass"))
    return f"{kept}… [truncated {cut} bytes]", True


# What of a member is read at all: four times its bound in characters. Scrubbing
# is linear but not free, and a request may carry 2 MiB; the text past this
# point could never be stored (decision 303).
READ_FACTOR = 4


def _marked(text: str, max_bytes: int, dropped: int) -> str:
    marker = f"… [truncated {dropped} bytes]"
    room = max(0, max_bytes - len(marker.encode()))
    return text.encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore") + marker


def _kept(
    text: str | None, max_bytes: int, scrubber: Scrubber, *, single_line: bool = False
) -> tuple[str | None, bool]:
    if text is None:
        return None, False
    sent_bytes = len(text.encode("utf-8", "surrogatepass"))
    read_cut = len(text) > READ_FACTOR * max_bytes
    clean = sanitized(text[: READ_FACTOR * max_bytes], single_line=single_line)
    marker = None if read_cut else TRUNCATION_MARKER.search(clean)
    tail = "" if marker is None else marker.group()
    body = scrubber.scrub(clean if marker is None else clean[: marker.start()])
    if marker is not None or read_cut:
        # Cut before scrubbing (by its sender, or here past what could be
        # stored): a hidden value cut in half at that end is taken out too.
        body = scrubber.scrub_cut_tail(body)
    bounded, cut = truncated(body + tail, max_bytes)
    if read_cut and not cut:
        dropped = sent_bytes - len(bounded.encode("utf-8", "surrogatepass"))
        bounded, cut = _marked(bounded, max_bytes, dropped), True
    return bounded, cut or marker is not None


def kept_detail(
    sent: FailureDetail | None, level: DetailLevel, scrubber: Scrubber
) -> FailureDetail | None:
    """What is stored of ``sent`` at ``level``: nothing when ``off`` or when
    nothing is left; otherwise the sanitised, scrubbed, bounded members (the
    traceback only at ``traceback``)."""
    if sent is None or level is DetailLevel.OFF:
        return None
    type_, type_cut = _kept(sent.type, TYPE_MAX_BYTES, scrubber, single_line=True)
    message, message_cut = _kept(sent.message, MESSAGE_MAX_BYTES, scrubber)
    traceback, traceback_cut = (None, False)
    if level is DetailLevel.TRACEBACK:
        traceback, traceback_cut = _kept(sent.traceback, TRACEBACK_MAX_BYTES, scrubber)
    if not (type_ or message or traceback):
        return None
    return FailureDetail(
        type_ or None,
        message or None,
        traceback or None,
        type_cut,
        message_cut,
        traceback_cut,
    )


def bounded_for_sending(detail: FailureDetail) -> FailureDetail:
    """``detail`` cut to the server's bounds (what a runtime sends: the server
    would cut it there anyway, and a large traceback need not travel)."""
    type_, type_cut = (
        (None, False)
        if detail.type is None
        else truncated(sanitized(detail.type, single_line=True), TYPE_MAX_BYTES)
    )
    message, message_cut = (
        (None, False) if detail.message is None else truncated(detail.message, MESSAGE_MAX_BYTES)
    )
    traceback, traceback_cut = (
        (None, False)
        if detail.traceback is None
        else truncated(detail.traceback, TRACEBACK_MAX_BYTES)
    )
    return FailureDetail(type_, message, traceback, type_cut, message_cut, traceback_cut)


def hidden_values(parameters: list[dict[str, Any]], visible: frozenset[str]) -> tuple[str, ...]:
    """The values of the stored identifying parameters (``[{"name", "type",
    "value"}]``) whose names are not in ``visible`` (contract §4.3), as text. A
    boolean is left out: it has two values, and replacing every "True" in a
    traceback would hide nothing."""
    return tuple(
        str(parameter["value"])
        for parameter in parameters
        if parameter.get("name") not in visible
        and parameter.get("value") is not None
        and parameter.get("type") != "bool"
    )
