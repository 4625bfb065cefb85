"""A viewer cannot recover or confirm a parameter value hidden from them
(``OXIDE_BATCH_VISIBLE_PARAMETERS``, contract §4.3, decision 200).

The attack of issue 38: the contract's ``key_digest`` is an unsalted SHA-256 of a
published encoding (contract §2.2.1), so hashing every candidate of a low-entropy
value (a customer id in 0..1000, a business date) finds the one shown. Every
surface a viewer reads — the API's instance, launch and list answers, the
console's lists, detail pages, search box and URL filters — is brute-forced here;
runtimes and operators keep the contract's digest.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from oxide_batch.domain.parameters import JobInstanceKey, JobParameter
from oxide_batch.roles import OPERATOR, VIEWER
from tests.api.support import Runtime, url

JOB = "billing"
CUSTOMER = 417
DAY = "2026-11-30"


def key(customer: int, day: str) -> JobInstanceKey:
    return JobInstanceKey.of(
        JOB,
        [
            JobParameter.from_json("customer_id", customer, identifying=True),
            JobParameter.from_json("business_date", day, identifying=True),
        ],
    )


def candidates() -> dict[str, str]:
    """digest → the guess it stands for: every customer id 0..1000 with the day
    known, every day of two years with the customer known."""
    found = {key(customer, DAY).digest: f"customer_id={customer}" for customer in range(1001)}
    start = date(2025, 12, 1)
    for offset in range(731):
        day = (start + timedelta(days=offset)).isoformat()
        found[key(CUSTOMER, day).digest] = f"business_date={day}"
    return found


def console_client(role: str) -> Client:
    user = get_user_model().objects.create_user(f"console-{role}", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def launched(rt: Runtime) -> dict[str, Any]:
    instance, execution = rt.launch(JOB, {"customer_id": CUSTOMER, "business_date": DAY})
    return {"instance": instance, "execution": execution}


def test_the_runtime_and_the_operator_keep_the_contract_digest(
    rt: Runtime, operator: Runtime, launched: dict[str, Any]
) -> None:
    true_digest = key(CUSTOMER, DAY).digest
    instance_id = launched["instance"]["id"]
    assert launched["instance"]["key_digest"] == true_digest
    assert operator.get(f"instances/{instance_id}")["key_digest"] == true_digest
    assert rt.get("instances")["results"][0]["key_digest"] == true_digest
    fused = rt.post(
        "launches",
        {
            "job_name": JOB,
            "identifying_parameters": {"customer_id": CUSTOMER + 1, "business_date": DAY},
            "owner_token": "ab" * 16,
        },
        201,
    )
    assert fused["instance"]["key_digest"] == key(CUSTOMER + 1, DAY).digest


def test_a_viewer_brute_force_finds_nothing_in_any_api_answer(
    viewer: Runtime, launched: dict[str, Any]
) -> None:
    instance_id = launched["instance"]["id"]
    execution_id = launched["execution"]["id"]
    shown = viewer.get(f"instances/{instance_id}")
    # Still 64 lowercase hex characters (the client reads the field), but keyed.
    assert re.fullmatch("[0-9a-f]{64}", shown["key_digest"])
    assert shown["key_digest"] != key(CUSTOMER, DAY).digest
    assert [p.get("value") for p in shown["parameters"]] == [None, None]
    answers = [
        viewer.client.get(url(f"instances/{instance_id}")).content,
        viewer.client.get(url("instances")).content,
        viewer.client.get(url("instances"), {"job_name": JOB}).content,
        viewer.client.get(url(f"executions/{execution_id}")).content,
        viewer.client.get(url("executions")).content,
    ]
    text = b"\n".join(answers).decode()
    assert [guess for digest, guess in candidates().items() if digest in text] == []


def test_a_viewer_brute_force_finds_nothing_in_the_console(launched: dict[str, Any]) -> None:
    client = console_client(VIEWER)
    instance_id = launched["instance"]["id"]
    execution_id = launched["execution"]["id"]
    pages = [
        reverse("admin:oxide_batch_jobinstance_changelist"),
        reverse("admin:oxide_batch_jobinstance_change", args=[instance_id]),
        reverse("admin:oxide_batch_jobexecution_changelist"),
        reverse("admin:oxide_batch_jobexecution_change", args=[execution_id]),
        reverse("admin:index"),
    ]
    text = ""
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, page
        text += response.content.decode()
    assert "key digest" in text.lower()
    assert [guess for digest, guess in candidates().items() if digest in text] == []


def test_an_operator_sees_the_contract_digest_in_the_console(launched: dict[str, Any]) -> None:
    page = reverse("admin:oxide_batch_jobinstance_change", args=[launched["instance"]["id"]])
    assert key(CUSTOMER, DAY).digest in console_client(OPERATOR).get(page).content.decode()


@pytest.mark.parametrize(
    ("model", "lookup"),
    [
        ("jobinstance", {"key_digest": "{digest}"}),
        ("jobinstance", {"key_digest__startswith": "{prefix}"}),
        ("jobinstance", {"identifying_parameters__icontains": str(CUSTOMER)}),
        ("jobinstance", {"identifying_parameters__0__value": DAY}),
        ("jobexecution", {"job_instance__key_digest": "{digest}"}),
        ("stepexecution", {"checkpoint__contains": "cursor"}),
    ],
)
def test_a_console_url_cannot_filter_by_a_hidden_column(
    launched: dict[str, Any], model: str, lookup: dict[str, str]
) -> None:
    """Django lets a changelist URL filter by any column of the row; the count
    of rows found would confirm a guess. Only the page's own filters filter."""
    digest = key(CUSTOMER, DAY).digest
    query = {name: value.format(digest=digest, prefix=digest[:8]) for name, value in lookup.items()}
    response = console_client(VIEWER).get(reverse(f"admin:oxide_batch_{model}_changelist"), query)
    assert response.status_code == 400


def test_the_console_search_answers_the_same_for_a_right_and_a_wrong_guess(
    launched: dict[str, Any],
) -> None:
    client = console_client(VIEWER)
    changelist = reverse("admin:oxide_batch_jobinstance_changelist")

    def found(term: str) -> tuple[int, str]:
        response = client.get(changelist, {"q": term})
        assert response.status_code == 200
        return response.context["cl"].result_count, str(list(response.context["messages"]))

    right, wrong = found(f"customer_id={CUSTOMER}"), found(f"customer_id={CUSTOMER + 1}")
    assert right[0] == wrong[0] == 0
    assert right[1].replace(str(CUSTOMER), "N") == wrong[1].replace(str(CUSTOMER + 1), "N")
