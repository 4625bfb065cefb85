"""DRF's plaintext tokens (``authtoken_token``) become hashed API tokens, and
the plaintext rows are deleted, in one transaction.

Every key keeps working as it is (the runtimes already hold it): its first 12
characters are its prefix, the SHA-256 of the whole key its digest — the rule
of ``oxide_batch.domain.tokens``, repeated here because a migration must not
change when app code does (a test keeps the two equal). The token is named
``migrated-drf-token`` and created when the DRF token was; it never expires.

``rest_framework.authtoken`` is no longer installed, so no model reads its
table: it is read with the connection's cursor where it exists (a database
that had the app) — on a new database there is nothing to do. The emptied
table and the app's applied-migration rows stay (``DROP TABLE authtoken_token``
once nobody will go back to a release with DRF tokens).

A key shorter than 32 characters (DRF makes 40; only a hand-made key is
shorter) is too short to keep: the migration stops, naming its user, and
changes nothing. Backward: nothing to do (a digest cannot give a key back);
the rows go with 0015's table.
"""

import hashlib
from datetime import UTC, datetime

from django.db import migrations
from django.utils.dateparse import parse_datetime

LEGACY_TABLE = "authtoken_token"
PREFIX_LENGTH = 12
MIN_KEY_LENGTH = 32
NAME = "migrated-drf-token"


def _aware(value):
    """The legacy row's ``created`` as an aware instant (SQLite's cursor gives a
    naive UTC datetime, or text)."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if not isinstance(value, datetime):
        return datetime.now(UTC)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def forward(apps, schema_editor):
    connection = schema_editor.connection
    if LEGACY_TABLE not in connection.introspection.table_names():
        return
    quote = connection.ops.quote_name
    table = quote(LEGACY_TABLE)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {quote('key')}, {quote('user_id')}, {quote('created')} FROM {table}"  # nosec B608 # constant, quoted names
        )
        rows = cursor.fetchall()
    short = sorted(str(user_id) for key, user_id, _ in rows if len(key) < MIN_KEY_LENGTH)
    if short:
        raise RuntimeError(
            f"{LEGACY_TABLE}: the keys of user ids {', '.join(short)} are shorter than "
            f"{MIN_KEY_LENGTH} characters; give those users new tokens "
            "(manage.py batch_token create), delete their old ones, then migrate again"
        )
    ApiToken = apps.get_model("oxide_batch", "ApiToken")
    ApiToken.objects.using(connection.alias).bulk_create(
        ApiToken(
            user_id=user_id,
            name=NAME,
            key_prefix=key[:PREFIX_LENGTH],
            digest=hashlib.sha256(key.encode("utf-8")).hexdigest(),
            created_at=_aware(created),
        )
        for key, user_id, created in rows
    )
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table}")  # nosec B608 # constant, quoted name


class Migration(migrations.Migration):
    dependencies = [("oxide_batch", "0015_api_token")]

    operations = [migrations.RunPython(forward, migrations.RunPython.noop)]
