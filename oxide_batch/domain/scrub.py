"""Secrets taken out of a failure's text before anything is stored (contract §2,
"Failure detail"; decisions 301-303).

A :class:`Scrubber` replaces, in this order: the values of the job instance's
hidden parameters (as text, when at least :data:`MIN_HIDDEN_VALUE_CHARS`
characters long), the built-in secret shapes of :data:`BUILTIN_PATTERNS`, and
the patterns a deployment adds (``OXIDE_BATCH_FAILURE_REDACT``). Each is
replaced by :data:`REDACTED`; a ``key=value`` pair keeps its key, so the text
still says what was there.

The patterns are lenient on purpose: a token cut short (by a runtime that
bounded its text before sending it) or glued to the word before it is still
recognised, and redacting a little too much costs nothing. Every repetition is bounded or
anchored so that 16 KiB of hostile text scrubs in linear time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

REDACTED = "[redacted]"

# A hidden value shorter than this is not replaced: "1", "EU" or "true" are
# not secrets, and replacing every "1" in a traceback would both ruin the text
# and tell the value by where the replacements fell (decision 302).
MIN_HIDDEN_VALUE_CHARS = 4

# The key of a pair whose value is a secret: ``password=…``, ``"api_key": "…"``,
# ``DB_PASSWORD: …``, ``aws_secret_access_key = …`` (bounded affixes).
_SENSITIVE_WORD = (
    r"(?:password|passwd|pwd|passphrase|token|secret|api[_-]?key|apikey|access[_-]?key"
    r"|private[_-]?key|credentials?|auth[_-]?key|session[_-]?key|signature)"
)
# The match begins at the secret word (``DB_`` of ``DB_PASSWORD`` stays before it,
# untouched): a bounded prefix tried at every position was a quadratic cost.
_KEY = rf"(?:{_SENSITIVE_WORD}[A-Za-z0-9_.-]{{0,40}})"
_QUOTED_VALUE = r"(?:\"(?:[^\"\\\n]|\\.){0,4096}\"?|'(?:[^'\\\n]|\\.){0,4096}'?)"
_BARE_VALUE = r"[^\s,;&'\"}\])]{1,4096}"

# (name, pattern, replacement): the replacement keeps the pair's key and quotes.
BUILTIN_PATTERNS: tuple[tuple[str, str, str], ...] = (
    (
        "private key block",
        r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----[\s\S]*?"
        r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----|\Z)",
        REDACTED,
    ),
    (
        "authorization header",
        r"(?i)((?:proxy-)?authorization[\"']?\s{0,8}[:=]\s{0,8}[\"']?)[^\r\n\"']{1,4096}",
        rf"\1{REDACTED}",
    ),
    ("bearer token", r"(?i)(bearer\s{1,8})[A-Za-z0-9\-._~+/]{1,4096}=*", rf"\1{REDACTED}"),
    ("basic credentials", r"(?i)(basic\s{1,8})[A-Za-z0-9+/]{8,4096}=*", rf"\1{REDACTED}"),
    (
        "connection-string password",
        r"([A-Za-z][A-Za-z0-9+.-]{0,30}://[^:/?#@\s]{0,256}:)[^@/?#\s]{1,1024}@",
        rf"\1{REDACTED}@",
    ),
    (
        "secret pair",
        rf"(?i)({_KEY}[\"']?\s{{0,8}}[:=]\s{{0,8}})"
        rf"(?:{_QUOTED_VALUE}|{_BARE_VALUE})",
        rf"\1{REDACTED}",
    ),
    ("AWS access key id", r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{4,64}", REDACTED),
    (
        "AWS secret access key",
        r"(?<![A-Za-z0-9/+])(?=[A-Za-z0-9/+]{0,39}[A-Z])(?=[A-Za-z0-9/+]{0,39}[a-z])"
        r"(?=[A-Za-z0-9/+]{0,39}[0-9])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])",
        REDACTED,
    ),
    (
        "GitHub token",
        r"(?:gh[pousr]_[A-Za-z0-9]{4,255}|github_pat_[A-Za-z0-9_]{4,255})",
        REDACTED,
    ),
    ("Slack token", r"xox[abposr]-[A-Za-z0-9-]{4,255}", REDACTED),
    ("Slack webhook", r"hooks\.slack\.com/services/[A-Za-z0-9/_-]{4,255}", REDACTED),
    ("Google API key", r"AIza[0-9A-Za-z_-]{4,64}", REDACTED),
    ("Stripe key", r"[rs]k_(?:live|test)_[A-Za-z0-9]{4,255}", REDACTED),
    ("JWT", r"eyJ[A-Za-z0-9_-]{4,4096}(?:\.[A-Za-z0-9_-]{0,4096}){0,2}", REDACTED),
)

_COMPILED = tuple(
    (re.compile(pattern), replacement) for _, pattern, replacement in BUILTIN_PATTERNS
)


def compile_redact_patterns(patterns: Iterable[str]) -> tuple[re.Pattern[str], ...]:
    """A deployment's patterns, compiled; ``ValueError`` naming the one that is
    not a regular expression, or that matches the empty string (it would
    redact nothing and everything at once)."""
    compiled = []
    for pattern in patterns:
        try:
            regex = re.compile(pattern)
        except re.error as error:
            raise ValueError(f"{pattern!r} is not a regular expression ({error})") from None
        if regex.fullmatch(""):
            raise ValueError(f"{pattern!r} matches the empty string")
        compiled.append(regex)
    return tuple(compiled)


@dataclass(frozen=True)
class Scrubber:
    """What one failure's text is scrubbed of: the hidden parameter values of its
    job instance and a deployment's patterns (besides the built-in shapes)."""

    hidden_values: tuple[str, ...] = ()
    patterns: tuple[re.Pattern[str], ...] = ()
    _values: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Longest first: a value that contains another is replaced whole.
        values = {v for v in self.hidden_values if len(v) >= MIN_HIDDEN_VALUE_CHARS}
        object.__setattr__(self, "_values", tuple(sorted(values, key=lambda v: (-len(v), v))))

    def scrub(self, text: str) -> str:
        """``text`` without a hidden value, a built-in secret shape or a deployment pattern."""
        for value in self._values:
            text = text.replace(value, REDACTED)
        for regex, replacement in _COMPILED:
            text = regex.sub(replacement, text)
        for regex in self.patterns:
            text = regex.sub(REDACTED, text)
        return text

    def scrub_cut_tail(self, text: str) -> str:
        """``text`` (cut short by its sender) without a hidden value's beginning
        at its very end: the half of a value the sender's cut left behind."""
        for value in self._values:
            for length in range(len(value) - 1, MIN_HIDDEN_VALUE_CHARS - 1, -1):
                if text.endswith(value[:length]):
                    return text[:-length] + REDACTED
        return text
