"""Whole runs side by side: one job of one step of K chunks, start to end, on either server.

The peers harness (bench.py here, ../shared/peers/prefect/bench.py for Prefect) times each
request kind apart. A runtime pays for a whole run: this script times that, with the same
method and the harness's own client, barrier, phases and CPU accounting (it loads the
harness and adds one operation to it):

- oxide_batch, the short forms (contract §4.2): ``POST launches`` (instance, attempt, claim,
  start), the step created STARTED, K chunk commits (the last one ends the step), the
  execution's end with its exit code: **K + 3 requests**, every write carrying the owner
  token and reading the control state from its own answer;
- Prefect 3: flow run create, RUNNING, task run create, RUNNING, K × RUNNING → RUNNING
  (Prefect's accepted progress write: a state row each, as our chunk commit), COMPLETED,
  and the flow run COMPLETED: **K + 6 requests**.

Each round's runs are checked in the server's database (every run COMPLETED, with exactly
its writes). One command per server, in one sitting, then the comparison::

    python bench/peers/runs.py --peer oxide   --clients 1,4 --rounds 3 --n 60 --out O.json
    python bench/peers/runs.py --peer prefect --clients 1,4 --rounds 3 --n 60 --out P.json
    python3 bench/peers/runs.py --compare P.json O.json

(run each with the server's own venv python, as bench.py; ``--prefect-bench`` names the
peer's harness when it is not at ../shared/peers/prefect/bench.py.)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
K = 3  # chunks per run: the example run (one step of three chunks)


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------- oxide_batch
def oxide_run(h, api, item, ctx):
    """K + 3 requests; every answer checked."""
    tag, run = item
    token = uuid.uuid4().hex
    st, j = api.req("POST", f"{h.API}/launches",
                    {"job_name": tag, "identifying_parameters": {"run": run}, "owner_token": token})
    h.check(st == 201 and j["execution"]["status"] == "STARTED" and j["execution"]["version"] == 1,
            f"launch {st} {str(j)[:300]}")
    eid = j["execution"]["id"]
    st, s = api.req("POST", f"{h.API}/executions/{eid}/steps",
                    {"step_name": "load", "status": "STARTED", "owner_token": token})
    h.check(st == 201 and s["status"] == "STARTED" and s["version"] == 1, f"step {st} {str(s)[:300]}")
    sid, v = s["id"], s["version"]
    for chunk in range(1, K + 1):
        body = {"expected_version": v, "counts": h.COUNTS, "checkpoint": h.checkpoint(chunk),
                "owner_token": token}
        if chunk == K:
            body.update(finish="COMPLETED", exit_code="LOADED")
        st, s = api.req("POST", f"{h.API}/steps/{sid}/checkpoint", body)
        h.check(st == 200 and s["version"] == v + 1 and s["control"]["owner_matches"]
                and not s["control"]["stop_requested"], f"chunk {st} {str(s)[:300]}")
        v = s["version"]
    h.check(s["status"] == "COMPLETED", f"last chunk left the step {s['status']}")
    st, e = api.req("POST", f"{h.API}/executions/{eid}/transition",
                    {"expected_version": 1, "status": "COMPLETED", "exit_code": "DONE", "owner_token": token})
    h.check(st == 200 and e["status"] == "COMPLETED" and e["version"] == 2, f"end {st} {str(e)[:300]}")
    return eid


def oxide_verify(h, args, tag, runs):
    rows = h.psql(args, f"""
      SELECT count(*), count(*) FILTER (WHERE e.status = 'COMPLETED' AND e.version = 2 AND e.exit_code = 'DONE'),
             count(*) FILTER (WHERE s.status = 'COMPLETED' AND s.version = {K + 1} AND s.committed_count = {K}
                              AND s.read_count = {100 * K} AND s.exit_code = 'LOADED')
        FROM ob_job_execution e JOIN ob_step_execution s ON s.job_execution_id = e.id
       WHERE e.job_name = '{tag}'""")[0]
    h.check(list(map(int, rows)) == [runs] * 3, f"runs persisted {rows}, expected {runs} each")


# ----------------------------------------------------------------------------- Prefect
def prefect_run(h, api, item, ctx):
    """K + 6 requests; every answer checked."""
    _, run = item
    st, j = api.req("POST", "/flow_runs/", {"flow_id": ctx["flow_id"], "name": run})
    h.check(st == 201 and j["state_type"] == "PENDING", f"flow run {st} {str(j)[:300]}")
    fr = j["id"]
    h.set_state(api, "flow_runs", fr, "RUNNING", "ACCEPT", "RUNNING", 201)
    st, t = api.req("POST", "/task_runs/", {"flow_run_id": fr, "task_key": h.TASK_KEY,
                                            "dynamic_key": run, "name": run})
    h.check(st == 201 and t["state_type"] == "PENDING", f"task run {st} {str(t)[:300]}")
    tr = t["id"]
    h.set_state(api, "task_runs", tr, "RUNNING", "ACCEPT", "RUNNING", 201)
    for _ in range(K):
        h.set_state(api, "task_runs", tr, "RUNNING", "ACCEPT", "RUNNING", 201)
    h.set_state(api, "task_runs", tr, "COMPLETED", "ACCEPT", "COMPLETED", 201)
    h.set_state(api, "flow_runs", fr, "COMPLETED", "ACCEPT", "COMPLETED", 201)
    return fr


def prefect_verify(h, args, tag, runs):
    like = f"{tag}-%"
    rows = h.psql(args, f"""
      SELECT count(*) FILTER (WHERE r.state_type = 'COMPLETED'),
             count(*) FILTER (WHERE t.state_type = 'COMPLETED'),
             (SELECT count(*) FROM task_run_state s JOIN task_run x ON x.id = s.task_run_id
               WHERE x.dynamic_key LIKE '{like}')
        FROM flow_run r JOIN task_run t ON t.flow_run_id = r.id WHERE r.name LIKE '{like}'""")[0]
    want = [runs, runs, runs * (K + 3)]  # PENDING, RUNNING, K x RUNNING, COMPLETED
    h.check(list(map(int, rows)) == want, f"runs persisted {rows}, expected {want}")


PEERS = {
    "oxide": {"requests": K + 3, "run": oxide_run, "verify": oxide_verify, "health": "health"},
    "prefect": {"requests": K + 6, "run": prefect_run, "verify": prefect_verify, "health": "health"},
}


# ----------------------------------------------------------------------------- a sitting
def measure(args):
    peer = PEERS[args.peer]
    path = HERE / "bench.py" if args.peer == "oxide" else Path(args.prefect_bench)
    h = load(path, f"peer_{args.peer}_bench")
    h.OPS["whole_run"] = lambda api, item, ctx: peer["run"](h, api, item, ctx)
    sys.argv = [str(path), *args.harness_args]
    env = h.load_env()
    hargs = argparse.Namespace(
        n=args.n, settle=1.0, clients=args.clients, rounds=args.rounds,
        url=env.get("OXIDE_BENCH_URL" if args.peer == "oxide" else "PREFECT_BENCH_URL"),
        token=env.get("OXIDE_TOKEN"),
        server_pid=int(env.get("GUNICORN_PID" if args.peer == "oxide" else "PREFECT_SERVER_PID", "0")) or None,
        pg_host="127.0.0.1",
        pg_port=int(env.get("PG_PORT", "55440")),
        pg_db="oxide" if args.peer == "oxide" else "prefect",
        pg_datadir=env.get("PG_DATADIR") or os.path.join(
            "/tmp", "peer-oxide-pg" if args.peer == "oxide" else "peer-pg", "data"),
    )
    ctx = h.setup_ctx(hargs)
    results = {}
    run_tag = f"wr{uuid.uuid4().hex[:6]}"
    for k in [int(x) for x in args.clients.split(",")]:
        rounds = []
        for r in range(args.rounds + 1):  # the first round warms up
            tag = f"{run_tag}-k{k}-r{r}"
            health, _ = h.run_phase(hargs, "health", [[None] * args.n for _ in range(k)], ctx)
            time.sleep(1.0)
            items = [[(tag, f"{tag}-c{c}-{i}") for i in range(args.n)] for c in range(k)]
            runs, _ = h.run_phase(hargs, "whole_run", items, ctx)
            peer["verify"](h, hargs, tag, k * args.n)
            time.sleep(1.0)
            if r:
                rounds.append({"health": health, "whole_run": runs})
                print(f"  {k} client(s), round {r}: {runs['ops_s']:.1f} runs/s, "
                      f"health {health['ops_s']:.0f}/s", flush=True)
        results[k] = rounds
    summary = {}
    for k, rounds in results.items():
        def med(phase, key):
            values = [r[phase][key] for r in rounds]
            return None if None in values else statistics.median(values)
        summary[k] = {
            "runs_s": med("whole_run", "ops_s"),
            "runs_s_min": min(r["whole_run"]["ops_s"] for r in rounds),
            "runs_s_max": max(r["whole_run"]["ops_s"] for r in rounds),
            "run_p50_ms": med("whole_run", "p50_ms"),
            "server_cpu_ms_run": (med("whole_run", "server_cpu_us_op") or 0) / 1000,
            "pg_cpu_ms_run": (med("whole_run", "pg_cpu_us_op") or 0) / 1000,
            "health_s": med("health", "ops_s"),
            "health_p50_ms": med("health", "p50_ms"),
        }
    document = {"peer": args.peer, "requests_per_run": peer["requests"], "chunks": K,
                "clients": args.clients, "rounds": args.rounds, "n_per_client": args.n,
                "loadavg": open("/proc/loadavg").read().split()[:3], "summary": summary,
                "rounds_raw": results}
    with open(args.out, "w") as f:
        json.dump(document, f, indent=1)
    print(json.dumps({"peer": args.peer, "requests_per_run": peer["requests"], "summary": summary}, indent=1))


def compare(prefect_path, oxide_path):
    p = json.load(open(prefect_path))
    o = json.load(open(oxide_path))
    print(f"| whole run (1 step, {o['chunks']} chunks) | clients | Prefect 3 | oxide_batch | ratio |")
    print("|---|---:|---:|---:|---:|")
    print(f"| requests per run | – | {p['requests_per_run']} | {o['requests_per_run']} | – |")
    for k in o["summary"]:
        ps, os_ = p["summary"][k], o["summary"][k]
        print(f"| runs/s (median) | {k} | {ps['runs_s']:.1f} | {os_['runs_s']:.1f} | "
              f"{os_['runs_s'] / ps['runs_s']:.1f}× |")
        print(f"| p50 ms per run | {k} | {ps['run_p50_ms']:.1f} | {os_['run_p50_ms']:.1f} | "
              f"{ps['run_p50_ms'] / os_['run_p50_ms']:.1f}× |")
        if k == "1":
            for key, label in (("server_cpu_ms_run", "server CPU ms per run"),
                               ("pg_cpu_ms_run", "PostgreSQL CPU ms per run")):
                print(f"| {label} | 1 | {ps[key]:.1f} | {os_[key]:.1f} | {ps[key] / os_[key]:.1f}× |")
            for key, label in (("server_cpu_ms_run", "server CPU ms per request"),
                               ("pg_cpu_ms_run", "PostgreSQL CPU ms per request")):
                per_p, per_o = ps[key] / p["requests_per_run"], os_[key] / o["requests_per_run"]
                print(f"| {label} | 1 | {per_p:.2f} | {per_o:.2f} | {per_p / per_o:.1f}× |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", choices=sorted(PEERS))
    ap.add_argument("--clients", default="1,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=60, help="runs per client per round")
    ap.add_argument("--out", default=None)
    ap.add_argument("--prefect-bench", default=str(HERE.parents[2] / "shared" / "peers" / "prefect" / "bench.py"))
    ap.add_argument("--compare", nargs=2, metavar=("PREFECT_JSON", "OXIDE_JSON"))
    args, rest = ap.parse_known_args()
    args.harness_args = rest
    if args.compare:
        compare(*args.compare)
        return
    if args.peer is None:
        ap.error("--peer or --compare")
    args.out = args.out or f"/tmp/runs-{args.peer}-{time.strftime('%H%M%S')}.json"
    measure(args)


if __name__ == "__main__":
    main()
