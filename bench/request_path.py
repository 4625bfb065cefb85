"""Where a hot request's CPU goes, piece by piece (issue 16, deliverable 3).

One command from a fresh clone (a throwaway durable PostgreSQL through
``scripts/with-postgres``, as ``bench/layers.py``)::

    .venv/bin/python bench/request_path.py            # ~1 min on 2 vCPU
    .venv/bin/python bench/request_path.py --rounds 7 --n 2000

Each request is handed to Django's WSGI handler in this process with the
environ gunicorn builds (no socket, no test client), so the CPU this process
spends per request is the server's Python per request, without gunicorn's
own loop. For a chunk commit (``POST /api/v1/steps/{id}/checkpoint``), an
execution exit status and ``/healthz`` it measures, in interleaved rounds
(medians, µs of this process's CPU per request):

- the whole request, with the project's settings;
- the whole request with one middleware left out, for each middleware (the
  difference is that middleware's cost on this request);
- the pieces alone, called as the request calls them: token authentication
  (DRF's header parsing, the credentials query, the digest check), the JSON
  parser, the input serializer (``is_valid`` + ``to_domain``), the repository
  unit of work (BEGIN, locking read, write, COMMIT — its Python only), the
  hand-built answer (``render``) and DRF's ``JSONRenderer``;
- what is left: the whole minus the pieces (URL resolution, DRF's request
  wrapping, content negotiation, permissions, throttle check, Django's
  handler, the middleware).

Every chunk commit is checked: the step's version and counts at the end
equal the requests that answered 200. Figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import layers  # bench/layers.py: the cluster, the database, the fixtures

DATABASE = "oxb_bench_request_path"
layers.DATABASE = DATABASE
DELTA = {"read": 10, "processed": 10, "written": 9, "filtered": 1}


def environ(method: str, path: str, token: str, body: bytes = b"") -> dict[str, Any]:
    """The WSGI environ gunicorn's sync worker builds for this request."""
    env: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "RAW_URI": path,
        "SERVER_PROTOCOL": "HTTP/1.1",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "REMOTE_ADDR": "127.0.0.1",
        "REMOTE_PORT": "50000",
        "HTTP_HOST": "127.0.0.1",
        "HTTP_CONNECTION": "keep-alive",
        "HTTP_ACCEPT": "application/json",
        "HTTP_ACCEPT_ENCODING": "identity",
        "HTTP_USER_AGENT": "bench",
        "HTTP_AUTHORIZATION": f"Token {token}",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if body:
        env["CONTENT_TYPE"] = "application/json"
        env["CONTENT_LENGTH"] = str(len(body))
    env["_body"] = body
    return env


class Handler:
    """Django's WSGI handler built with ``middleware`` (the project's by default)."""

    def __init__(self, middleware: list[str] | None = None) -> None:
        from django.conf import settings
        from django.core.handlers.wsgi import WSGIHandler

        saved = settings.MIDDLEWARE
        if middleware is not None:
            settings.MIDDLEWARE = middleware
        try:
            self.wsgi = WSGIHandler()
        finally:
            settings.MIDDLEWARE = saved

    def __call__(self, env: dict[str, Any]) -> tuple[str, bytes]:
        request_env = dict(env)
        request_env["wsgi.input"] = io.BytesIO(request_env.pop("_body"))
        answer: list[str] = []

        def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
            answer.append(status)
            return None

        chunks = self.wsgi(request_env, start_response)
        try:
            content = b"".join(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        return answer[0], content


class Step:
    """A STARTED step and its expected version, moved by each chunk commit."""

    def __init__(self) -> None:
        target = layers.started_step()
        self.id, self.version, self.commits = target.id, target.version, 0

    def body(self) -> bytes:
        envelope = layers.checkpoint(self.commits)
        return json.dumps(
            {"expected_version": self.version, "counts": DELTA, "checkpoint": envelope}
        ).encode()

    def committed(self, content: bytes) -> None:
        self.version = json.loads(content)["version"]
        self.commits += 1


def short(path: str) -> str:
    return path.rsplit(".", 1)[1]


def per_request(call: Callable[[], object], n: int) -> float:
    """µs of this process's CPU per call, over ``n`` calls."""
    began = time.process_time_ns()
    for _ in range(n):
        call()
    return (time.process_time_ns() - began) / n / 1000


class Bench:
    def __init__(self, token: str) -> None:
        from django.conf import settings

        self.token = token
        self.middleware = list(settings.MIDDLEWARE)
        self.handler = Handler()
        self.step = Step()
        execution = layers.started_execution()
        self.execution_id, self.execution_version = execution.id, execution.version

    # -- whole requests ----------------------------------------------------------

    def chunk(self, handler: Handler) -> None:
        """One chunk commit through the whole request path."""
        step = self.step
        env = environ("POST", f"/api/v1/steps/{step.id}/checkpoint", self.token, step.body())
        status, content = handler(env)
        if not status.startswith("200"):
            raise SystemExit(f"chunk commit answered {status}: {content[:300]!r}")
        step.committed(content)

    def exit_status(self, handler: Handler) -> None:
        body = json.dumps(
            {"expected_version": self.execution_version, "exit_code": "RUNNING"}
        ).encode()
        env = environ(
            "POST", f"/api/v1/executions/{self.execution_id}/exit-status", self.token, body
        )
        status, content = handler(env)
        if not status.startswith("200"):
            raise SystemExit(f"exit status answered {status}: {content[:300]!r}")
        self.execution_version = json.loads(content)["version"]

    def healthz(self, handler: Handler) -> None:
        status, _ = handler(environ("GET", "/healthz", self.token))
        if not status.startswith("200"):
            raise SystemExit(f"/healthz answered {status}")

    # -- pieces --------------------------------------------------------------------

    def pieces(self, n: int) -> dict[str, float]:
        from django.test import RequestFactory
        from rest_framework.parsers import JSONParser
        from rest_framework.renderers import JSONRenderer
        from rest_framework.request import Request

        from oxide_batch.api import deps, render
        from oxide_batch.api import serializers as s
        from oxide_batch.api.authentication import BatchTokenAuthentication
        from oxide_batch.api.contract import StrictJSONParser
        from oxide_batch.services import bootstrap

        step = self.step
        body = step.body()
        factory = RequestFactory()
        django_request = factory.post(
            "/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Token {self.token}"
        )
        authentication = BatchTokenAuthentication()
        request = Request(django_request)
        parser = StrictJSONParser()
        data = parser.parse(io.BytesIO(body))
        repository = bootstrap.repository(deps.clock)
        answer: dict[str, Any] = {}

        def read_input() -> Any:
            serializer = s.ChunkInput(data=data)
            serializer.is_valid(raise_exception=True)
            return serializer.to_domain()

        def unit_of_work() -> None:
            _, counts, checkpoint, context = read_input()
            with repository.begin() as uow:
                written = uow.commit_chunk(
                    step.id, step.version, counts, checkpoint=checkpoint, context=context
                )
                uow.commit()
            step.version = written.version
            step.commits += 1
            answer["step"] = written

        figures = {
            "authentication": per_request(lambda: authentication.authenticate(request), n),
            "parser (strict JSON)": per_request(lambda: parser.parse(io.BytesIO(body)), n),
            "parser (DRF's JSONParser)": per_request(
                lambda: JSONParser().parse(io.BytesIO(body)), n
            ),
            "input serializer": per_request(read_input, n),
        }
        # The repository's figure includes the serializer (to get domain values);
        # subtract it so the unit of work stands alone.
        with_input = per_request(unit_of_work, n)
        figures["repository unit of work"] = with_input - figures["input serializer"]
        rendered = render.step_data(answer["step"])
        figures["answer (render.step_data)"] = per_request(
            lambda: render.step_data(answer["step"]), n
        )
        figures["renderer (JSONRenderer)"] = per_request(lambda: JSONRenderer().render(rendered), n)
        figures.update(self.middleware_costs(body, n))
        return figures

    def middleware_costs(self, body: bytes, n: int) -> dict[str, float]:
        """Each middleware in its place: the chain of the first k middleware
        around a view that answers at once, called with a fresh request as
        Django calls it; middleware k costs chain(k) − chain(k − 1) (the
        authentication and messages middleware need the session's before them)."""
        from django.http import HttpResponse
        from django.test import RequestFactory
        from django.utils.module_loading import import_string

        factory = RequestFactory(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Token {self.token}")
        path = f"/api/v1/steps/{self.step.id}/checkpoint"

        def respond(request: Any) -> HttpResponse:
            return HttpResponse(b"{}", content_type="application/json")

        def chain(count: int) -> Callable[[Any], Any]:
            handler: Callable[[Any], Any] = respond
            for dotted in reversed(self.middleware[:count]):
                handler = import_string(dotted)(handler)
            return handler

        def call(handler: Callable[[Any], Any]) -> None:
            handler(factory.post(path, body, content_type="application/json"))

        totals = [
            per_request(functools.partial(call, chain(k)), n)
            for k in range(len(self.middleware) + 1)
        ]
        return {
            f"middleware {short(dotted)}": totals[k + 1] - totals[k]
            for k, dotted in enumerate(self.middleware)
        }


def profile(bench: Bench, n: int, sort: str = "cumulative", *restrictions: Any) -> None:
    """cProfile over ``n`` chunk commits: the functions by their own time."""
    import cProfile
    import pstats

    handler = bench.handler
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    for _ in range(n):
        bench.chunk(handler)
    profiler.disable()
    pstats.Stats(profiler).sort_stats(sort).print_stats(*restrictions)


def median_table(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--n", type=int, default=500, help="requests per measurement")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile (CPU time) over --n chunk commits instead"
    )
    options = parser.parse_args()

    layers.reexec_under_postgres(__file__)
    layers.create_database()
    try:
        token = layers.setup_django()
        bench = Bench(token)
        handler = bench.handler
        for _ in range(100):  # warm up
            bench.chunk(handler)
            bench.exit_status(handler)
            bench.healthz(handler)
        bench.pieces(50)
        if options.profile:
            profile(bench, options.n)
            return
        whole: list[dict[str, float]] = []
        pieces: list[dict[str, float]] = []
        for _ in range(options.rounds):
            whole.append(
                {
                    "chunk commit": per_request(functools.partial(bench.chunk, handler), options.n),
                    "execution exit status": per_request(
                        functools.partial(bench.exit_status, handler), options.n
                    ),
                    "/healthz (no database)": per_request(
                        functools.partial(bench.healthz, handler), options.n
                    ),
                }
            )
            pieces.append(bench.pieces(options.n))
        report(median_table(whole), median_table(pieces), bench, options)
    finally:
        layers.drop_database()


def report(
    whole: dict[str, float], pieces: dict[str, float], bench: Bench, options: argparse.Namespace
) -> None:
    step = bench.step
    with layers.admin(DATABASE) as connection:
        version, read = connection.execute(
            "SELECT version, read_count FROM ob_step_execution WHERE id = %s", [step.id]
        ).fetchone()  # type: ignore[misc]
    commits_ok = version == step.version and read == step.commits * DELTA["read"]
    full = whole["chunk commit"]
    load = Path("/proc/loadavg").read_text().split()[0]
    print(
        f"\nCPU of this process per request, µs (median of {options.rounds} rounds × "
        f"{options.n}); load average {load}"
    )
    print(f"\n{'whole requests (Django WSGI handler)':50} {'µs':>8}")
    for key, value in whole.items():
        print(f"  {key:48} {value:8.0f}")
    print(f"\n{'chunk commit, the pieces alone':50} {'µs':>8} {'share':>7}")
    counted = 0.0
    for key, value in pieces.items():
        print(f"  {key:48} {value:8.0f} {value / full:7.0%}")
        if key != "parser (DRF's JSONParser)":
            counted += value
    rest = full - counted
    print(f"  {'the rest (handler, URL, DRF dispatch, answer)':48} {rest:8.0f} {rest / full:7.0%}")
    print(
        f"\nchecked: {step.commits} chunk commits, the step's version and counts "
        f"{'agree' if commits_ok else 'DISAGREE'}"
    )
    if options.json:
        options.json.write_text(json.dumps({"whole": whole, "pieces": pieces}, indent=2))
    if not commits_ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
