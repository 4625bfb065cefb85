"""Refusals in the console's frame (issue 25 point 6): a staff user without a
permission gets a 403 page with the admin's header and breadcrumbs, naming the
permission (its name and ``app_label.codename``) and the role groups that grant
it, with a link back; the start pages offer the dashboard once, and only to
whoever may open it. The API keeps its problem answers.

Runs in the standalone service and in the host project (tests/host: Django's
own admin site, no ``handler403``); tests marked ``standalone`` need the
service's site or URLs."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import Client, RequestFactory
from django.urls import reverse

from oxide_batch import models
from oxide_batch.roles import ensure_roles

pytestmark = pytest.mark.django_db

User = get_user_model()
DASHBOARD_LINK = "Open the batch dashboard"


def staff(username: str = "sid", *, groups: tuple[str, ...] = (), perms: tuple[str, ...] = ()):
    """A logged-in staff member with only the given groups and permissions."""
    ensure_roles()
    user = User.objects.create_user(username, password="pw", is_staff=True)
    for group in groups:
        user.groups.add(Group.objects.get(name=group))
    for name in perms:
        app_label, codename = name.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    client = Client()
    client.force_login(user)
    return client


def refused(client: Client, path: str, **extra) -> str:
    response = client.get(path, **extra)
    assert response.status_code == 403, (path, response.status_code)
    assert response.templates[0].name == "admin/oxide_batch/403.html"
    assert response["Content-Type"].startswith("text/html")
    assert "no-cache" in response["Cache-Control"]
    return response.content.decode()


def in_the_frame(html: str) -> None:
    """The admin's header and breadcrumbs, and the console's stylesheet."""
    assert '<div id="site-name">' in html
    assert '<div class="breadcrumbs">' in html
    crumbs = html.split('<div class="breadcrumbs">', 1)[1].split("</div>", 1)[0]
    assert "Home" in crumbs
    assert "Permission needed" in crumbs
    assert "<h1>Permission needed</h1>" in html
    assert "oxide_batch/console.css" in html
    assert "403 Forbidden" not in html


def test_a_batch_table_refused_names_the_role_permission_and_its_groups():
    html = refused(staff(), reverse("admin:oxide_batch_jobexecution_changelist"))
    in_the_frame(html)
    assert "<strong>Can read batch metadata</strong> (<code>oxide_batch.view_batch</code>)" in html
    assert (
        "which the groups <code>batch-viewer</code>, <code>batch-runtime</code> and "
        "<code>batch-operator</code> grant." in html
    )
    # Django's own permission for that model is enough too, and said so.
    assert "<code>oxide_batch.view_jobexecution</code>" in html
    assert "either one is enough" in html
    assert "Ask an administrator" in html


def test_the_dashboard_refused_names_the_base_permission():
    html = refused(staff(), reverse("admin:oxide_batch_dashboard"))
    in_the_frame(html)
    assert "<code>oxide_batch.view_batch</code>" in html


def test_an_action_refused_names_its_own_permission_not_the_one_held(demo):
    execution = models.JobExecution.objects.get(status="UNKNOWN")
    path = reverse("admin:oxide_batch_jobexecution_act", args=["recover"])
    html = refused(staff(groups=("batch-viewer",)), f"{path}?ids={execution.pk}")
    in_the_frame(html)
    assert "(<code>oxide_batch.recover_execution</code>)" in html
    assert "which the group <code>batch-operator</code> grants." in html
    assert "oxide_batch.view_batch" not in html
    assert "signed in as <strong>sid</strong>" in html


def test_a_refusal_for_a_permission_held_names_none(demo):
    """A viewer posting to a read-only page: refused, but not for lack of a
    permission it holds — the page says so without naming one."""
    execution = models.JobExecution.objects.order_by("pk").first()
    assert execution is not None
    client = staff(groups=("batch-viewer",))
    response = client.post(reverse("admin:oxide_batch_jobexecution_change", args=[execution.pk]))
    assert response.status_code == 403
    html = response.content.decode()
    in_the_frame(html)
    assert "may not do this here" in html
    assert "<code>oxide_batch." not in html


def test_the_link_back_leads_to_the_previous_page_of_this_site():
    client = staff()
    path = reverse("admin:oxide_batch_jobexecution_changelist")
    came_from = reverse("admin:index") + "?from=here"
    html = refused(client, path, HTTP_REFERER=f"http://testserver{came_from}")
    assert f'<a class="button" href="{came_from}">Back to the previous page</a>' in html


@pytest.mark.parametrize(
    "referer",
    [
        "https://elsewhere.example/admin/",  # another site
        "itself",  # the refused page
        "javascript:alert(1)",
        "http://testserver//elsewhere.example/x",  # this host, a path read as a host
        "http://testserver/\\elsewhere.example/x",
        "",
    ],
    ids=["foreign", "itself", "script", "double-slash", "backslash", "none"],
)
def test_otherwise_the_link_back_leads_to_the_console_start(referer):
    path = reverse("admin:oxide_batch_jobexecution_changelist")
    if referer == "itself":
        referer = f"http://testserver{path}"
    extra = {"HTTP_REFERER": referer} if referer else {}
    html = refused(staff(), path, **extra)
    start = reverse("admin:index")
    assert f'<a class="button" href="{start}">Back to the console&#x27;s start page</a>' in html
    assert "elsewhere.example" not in html
    assert "javascript:" not in html


def test_a_refusal_reads_a_bounded_number_of_queries(django_assert_max_num_queries):
    client = staff()
    with django_assert_max_num_queries(8):
        refused(client, reverse("admin:oxide_batch_jobexecution_changelist"))


@pytest.mark.standalone
def test_django_s_own_pages_refuse_in_the_frame_too():
    """The user list of django.contrib.auth: Django's view raises a bare
    PermissionDenied; the page names the model's view permission."""
    html = refused(staff(groups=("batch-viewer",)), reverse("admin:auth_user_changelist"))
    in_the_frame(html)
    assert "<strong>Can view user</strong> (<code>auth.view_user</code>)" in html


@pytest.mark.standalone
def test_the_service_s_handler403_frames_pages_and_keeps_problems_for_the_api():
    from oxide_batch.api.errors import handler403

    factory = RequestFactory()
    page = factory.get("/admin/somewhere/")
    page.user = User.objects.create_user("pat", password="pw", is_staff=True)
    response = handler403(page, None)
    assert response.status_code == 403
    html = response.content.decode()
    assert '<div id="site-name">' in html
    assert "<code>oxide_batch.view_batch</code>" in html

    api = factory.get("/api/v1/jobs/")
    answer = handler403(api, None)
    assert answer.status_code == 403
    assert answer["Content-Type"] == "application/problem+json"
    assert json.loads(answer.content)["code"] == "permission_denied"


# -- links to pages a user cannot open are not shown -------------------------------


def test_the_app_index_offers_the_dashboard_once_to_a_viewer():
    response = staff(groups=("batch-viewer",)).get(reverse("admin:app_list", args=["oxide_batch"]))
    assert response.status_code == 200
    assert response.content.decode().count(DASHBOARD_LINK) == 1


def test_the_app_index_does_not_offer_the_dashboard_to_whoever_cannot_open_it():
    client = staff(perms=("oxide_batch.view_apitoken",))
    response = client.get(reverse("admin:app_list", args=["oxide_batch"]))
    assert response.status_code == 200  # the token list is theirs to see
    assert DASHBOARD_LINK not in response.content.decode()
    assert client.get(reverse("admin:oxide_batch_dashboard")).status_code == 403


@pytest.mark.standalone
def test_the_site_index_offers_the_dashboard_only_to_whoever_may_open_it():
    viewer = staff("vic", groups=("batch-viewer",)).get(reverse("admin:index"))
    assert viewer.content.decode().count(DASHBOARD_LINK) == 1
    other = staff("oli", perms=("oxide_batch.view_apitoken",)).get(reverse("admin:index"))
    assert other.status_code == 200
    assert DASHBOARD_LINK not in other.content.decode()
