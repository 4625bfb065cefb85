"""The way to an override (issue 39): the case file's "Recover #N with an
override…" link lands on the recover page with the override box ticked, so
writing the note and confirming recovers (it used to arrive unticked and
answer "not stale yet"); the note is a text box of up to 1000 bytes, whose
line breaks the decision records as spaces (the audit keeps one line)."""

from __future__ import annotations

import html
import re

import pytest

from oxide_batch import models
from tests.admin.test_actions import _hidden, _said
from tests.admin.test_override import NOTE, _case, _recover, lease_ttl, owned

pytestmark = pytest.mark.django_db
__all__ = ["lease_ttl"]  # the fixture, used by name


def _override_link(client, execution_id: int) -> str:
    case = _case(client, execution_id)
    found = re.search(
        rf'<a class="button" href="([^"]+)">Recover #{execution_id} with an override', case
    )
    assert found is not None
    return html.unescape(found.group(1))


def _checkbox(page: str) -> str:
    found = re.search(r'<input type="checkbox" name="override"[^>]*>', page)
    assert found is not None
    return found.group(0)


def test_the_override_link_lands_with_the_override_ticked(operator_client, lease_ttl):
    execution = owned().job_execution_id
    url = _override_link(operator_client, execution)
    page = operator_client.get(url)
    assert page.status_code == 200
    text = page.content.decode()
    assert " checked" in _checkbox(text)
    # Writing the note and confirming is all that is left: it recovers.
    form = {k: v for k, v in _hidden(text).items() if k != "csrfmiddlewaretoken"}
    form.update(_recover(override="on", override_note=NOTE))
    done = operator_client.post(url, form, follow=True)
    (said,) = _said(done)
    assert said.startswith(f"execution #{execution}: applied — ")
    assert models.JobExecution.objects.get(pk=execution).status == "FAILED"


def test_the_recover_page_without_the_link_leaves_the_override_unticked(operator_client, lease_ttl):
    execution = owned().job_execution_id
    url = _override_link(operator_client, execution).replace("&override=1", "")
    assert " checked" not in _checkbox(operator_client.get(url).content.decode())


def test_the_note_is_a_text_box_and_its_line_breaks_become_spaces(operator_client, lease_ttl):
    execution = owned().job_execution_id
    url = _override_link(operator_client, execution)
    text = operator_client.get(url).content.decode()
    assert re.search(r'<textarea name="override_note"[^>]*maxlength="1000"', text)
    form = {k: v for k, v in _hidden(text).items() if k != "csrfmiddlewaretoken"}
    note = "Pod batch-7 was deleted by the node drain.\r\n  Nothing runs it any more.\r\n"
    form.update(_recover(override="on", override_note=note))
    operator_client.post(url, form)
    decision = models.RecoveryDecision.objects.get(job_execution_id=execution)
    assert decision.override_note == (
        "Pod batch-7 was deleted by the node drain. Nothing runs it any more."
    )
