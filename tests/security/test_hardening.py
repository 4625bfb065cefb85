"""What the bandit findings were fixed with (not merely silenced): the API
client opens http(s) URLs only, and the console's SVG pictures concatenate
fragments without ``mark_safe``, so a plain string among them is escaped."""

from __future__ import annotations

import pytest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from oxide_batch.admin.svg import joined
from oxide_batch.client import OperatorClient, RuntimeClient
from oxide_batch.client.transport import ApiTransport


@pytest.mark.parametrize("client", [ApiTransport, RuntimeClient, OperatorClient])
@pytest.mark.parametrize("base", ["file:///etc/passwd", "ftp://example.com", "127.0.0.1:8000"])
def test_the_client_refuses_a_base_url_that_is_not_http(client: type, base: str) -> None:
    with pytest.raises(ValueError, match="http"):
        client(base, "token")


def test_the_client_takes_http_and_https() -> None:
    assert ApiTransport("HTTPS://batch.example.com/", "t").base_url == "HTTPS://batch.example.com"
    assert ApiTransport("http://127.0.0.1:8000", "t").base_url == "http://127.0.0.1:8000"


def test_svg_fragments_are_joined_without_trusting_a_plain_string() -> None:
    safe = format_html("<rect><title>{}</title></rect>", "<b>a & b</b>")
    result = joined([safe, "<script>x</script>"])  # type: ignore[list-item]
    assert isinstance(result, SafeString)
    assert result == (
        "<rect><title>&lt;b&gt;a &amp; b&lt;/b&gt;</title></rect>&lt;script&gt;x&lt;/script&gt;"
    )
