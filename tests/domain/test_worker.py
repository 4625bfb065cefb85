"""The worker's identity (decision 310): bounded, visible names and a
positive pid; described as the line an operator reads."""

from __future__ import annotations

import pytest

from oxide_batch.domain.errors import NameContainsInvisible, NameTooLong
from oxide_batch.domain.worker import WorkerIdentity, describe_worker, worker_data


def test_every_member_is_optional_and_known_says_whether_any_is_set():
    assert not WorkerIdentity().known
    assert WorkerIdentity(pid=1).known


@pytest.mark.parametrize(
    ("members", "error"),
    [
        ({"host": "h" * 256}, NameTooLong),
        ({"name": "n" * 129}, NameTooLong),
        ({"client": "c" * 129}, NameTooLong),
        ({"host": "a\u202eb"}, NameContainsInvisible),
        ({"pid": 0}, ValueError),
        ({"pid": 2**31}, ValueError),
        ({"pid": True}, ValueError),
    ],
)
def test_out_of_bounds_members_are_refused(members, error):
    with pytest.raises(error):
        WorkerIdentity(**members)


def test_a_row_reads_back_as_stored_and_none_when_nothing_is():
    row = {"worker_host": "w", "worker_pid": 3, "worker_name": None, "worker_client": None}
    assert WorkerIdentity.from_row(row) == WorkerIdentity(host="w", pid=3)
    assert WorkerIdentity.from_row(dict.fromkeys(row)) is None
    assert WorkerIdentity.from_data({"host": "w", "pid": 3, "user": "u"}) == WorkerIdentity("w", 3)


def test_the_operators_line_and_the_answers_member():
    identity = WorkerIdentity("worker-3", 4122, "loader-2", "oxide-batch 0.6.0")
    assert describe_worker(identity, "nightly-runtime") == (
        "nightly-runtime on worker-3, pid 4122, oxide-batch 0.6.0 (worker loader-2)"
    )
    assert describe_worker(None, "u") == "u on an unknown host"
    assert describe_worker(None, None) is None
    assert worker_data(None, None) is None
    assert worker_data(identity, None) == {
        "host": "worker-3",
        "pid": 4122,
        "name": "loader-2",
        "client": "oxide-batch 0.6.0",
        "user": None,
    }
