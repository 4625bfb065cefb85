"""The password hasher of the tests: the settings' PBKDF2 at one iteration.

The settings' hasher runs 1,000,000 iterations (about half a second on the
test machine) for every account a test makes with a password and every login
by password; thousands of tests do one of those, in every pass of
``scripts/test`` (decision 500). What a test proves of a login — the right
password lets in, a wrong one is refused, the account is throttled — does not
depend on the count. The algorithm stays ``pbkdf2_sha256``, and the count is
written in each hash, so a server process started by a test (gunicorn,
``manage.py``, under the real settings) still checks such a password.
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class OneIterationPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1


HASHERS = ["tests.passwords.OneIterationPBKDF2PasswordHasher"]
