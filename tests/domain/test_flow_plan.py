"""Flow plans of format-2/3 manifests, patterns and targets (contract §2.3.5).

Pure domain: no database.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from oxide_batch.domain.errors import (
    EmptyName,
    FlowStateCorrupt,
    InvalidCharacters,
    InvalidManifest,
)
from oxide_batch.domain.flow import (
    MAX_NODES,
    MAX_START_LIMIT,
    MAX_TRANSITIONS,
    FlowDecisionRequest,
    FlowNode,
    FlowPlan,
    FlowTarget,
    FlowTransitionKind,
    NodeKind,
    TerminalKind,
    check_decision_against_plan,
    pattern_regex,
)

DIGEST = "a" * 64
INPUT = "b" * 64


def valid() -> dict[str, Any]:
    return {
        "format": 2,
        "job": "flow_job",
        "entry": "load",
        "nodes": [
            {"id": "load", "kind": "step", "step": "load-step"},
            {"id": "route", "kind": "decision"},
            {
                "id": "publish",
                "kind": "partitioned_step",
                "start_limit": 2,
                "allow_start_if_complete": True,
            },
            {"id": "fan", "kind": "split"},
            {"id": "gather", "kind": "join"},
        ],
        "transitions": [
            {"source": "load", "pattern": "*", "target": {"node": "route"}},
            {"source": "route", "pattern": "PUBLISH", "target": {"node": "publish"}},
            {"source": "route", "pattern": "*", "target": {"terminal": "COMPLETE"}},
            {"source": "publish", "pattern": "COMPLETED", "target": {"node": "fan"}},
            {"source": "publish", "pattern": "*", "target": {"terminal": "FAIL"}},
            {"source": "fan", "pattern": "*", "target": {"node": "gather"}},
            {"source": "gather", "pattern": "STOPPED", "target": {"terminal": "STOP"}},
        ],
    }


def with_(change) -> dict[str, Any]:
    manifest = copy.deepcopy(valid())
    change(manifest)
    return manifest


def plan_of(*patterns: str, source: str = "s") -> FlowPlan:
    """One step ``s`` whose i-th transition (pattern i) leads to node ``t<i>``."""
    targets = [f"t{index}" for index in range(len(patterns))]
    return FlowPlan.from_manifest(
        {
            "entry": source,
            "nodes": [
                {"id": source, "kind": "step"},
                *({"id": t, "kind": "step"} for t in targets),
            ],
            "transitions": [
                {"source": source, "pattern": pattern, "target": {"node": target}}
                for pattern, target in zip(patterns, targets, strict=True)
            ],
        }
    )


def chosen(plan: FlowPlan, outcome: str) -> str | None:
    target = plan.target_for("s", outcome)
    return None if target is None else target.node


# --------------------------------------------------------------------------- reading


def test_a_valid_plan_is_read():
    plan = FlowPlan.from_manifest(valid())
    assert plan.entry == "load"
    assert list(plan.nodes) == ["load", "route", "publish", "fan", "gather"]
    assert plan.nodes["load"] == FlowNode("load", NodeKind.STEP, "load-step")
    assert plan.nodes["route"].step == "route"  # the step defaults to the node id
    assert plan.nodes["publish"] == FlowNode(
        "publish", NodeKind.PARTITIONED_STEP, "publish", 2, allow_start_if_complete=True
    )
    assert {node.kind for node in plan.nodes.values()} == set(NodeKind)
    assert [t.index for t in plan.transitions] == list(range(7))
    assert plan.transitions[2].target == FlowTarget(terminal=TerminalKind.COMPLETE)
    assert plan.target_for("gather", "STOPPED") == FlowTarget(terminal=TerminalKind.STOP)


def test_a_plan_without_transitions_is_valid():
    plan = FlowPlan.from_manifest(with_(lambda m: m.update(transitions=[])))
    assert plan.transitions == ()
    assert plan.target_for("load", "COMPLETED") is None


def test_the_largest_plan_is_valid():
    nodes = [{"id": f"n{index}", "kind": "step"} for index in range(MAX_NODES)]
    transitions = [
        {"source": f"n{index % MAX_NODES}", "pattern": f"P{index}", "target": {"node": "n0"}}
        for index in range(MAX_TRANSITIONS)
    ]
    plan = FlowPlan.from_manifest({"entry": "n0", "nodes": nodes, "transitions": transitions})
    assert (len(plan.nodes), len(plan.transitions)) == (MAX_NODES, MAX_TRANSITIONS)


def _set_node(index: int, **fields: Any):
    return lambda m: m["nodes"][index].update(fields)


def _drop_node_key(index: int, key: str):
    return lambda m: m["nodes"][index].pop(key)


def _set_transition(index: int, **fields: Any):
    return lambda m: m["transitions"][index].update(fields)


MALFORMED = {
    "unknown-kind": _set_node(1, kind="gateway"),
    "kind-in-upper-case": _set_node(1, kind="DECISION"),
    "kind-not-a-string": _set_node(1, kind=["step"]),
    "duplicate-node": lambda m: m["nodes"].append({"id": "route", "kind": "step"}),
    "node-not-an-object": lambda m: m["nodes"].append("route"),
    "node-without-id": _drop_node_key(1, "id"),
    "node-without-kind": _drop_node_key(1, "kind"),
    "node-with-unknown-key": _set_node(1, timeout=5),
    "node-id-empty": _set_node(1, id=""),
    "node-id-padded": _set_node(1, id=" route"),
    "node-id-not-a-string": _set_node(1, id=7),
    "node-id-too-long": _set_node(1, id="n" * 129),
    "node-step-empty": _set_node(0, step=""),
    "start-limit-zero": _set_node(2, start_limit=0),
    "start-limit-negative": _set_node(2, start_limit=-1),
    "start-limit-true": _set_node(2, start_limit=True),
    "start-limit-string": _set_node(2, start_limit="2"),
    "start-limit-float": _set_node(2, start_limit=2.0),
    "start-limit-too-large": _set_node(2, start_limit=MAX_START_LIMIT + 1),
    "allow-start-not-a-boolean": _set_node(2, allow_start_if_complete=1),
    "no-nodes": lambda m: m.update(nodes=[]),
    "nodes-missing": lambda m: m.pop("nodes"),
    "nodes-not-a-list": lambda m: m.update(nodes={"id": "load", "kind": "step"}),
    "too-many-nodes": lambda m: m["nodes"].extend(
        {"id": f"extra{index}", "kind": "step"} for index in range(MAX_NODES - 4)
    ),
    "missing-entry": lambda m: m.pop("entry"),
    "entry-names-no-node": lambda m: m.update(entry="nowhere"),
    "entry-empty": lambda m: m.update(entry=""),
    "transitions-missing": lambda m: m.pop("transitions"),
    "transitions-not-a-list": lambda m: m.update(transitions={}),
    "too-many-transitions": lambda m: m.update(
        transitions=[
            {"source": "load", "pattern": f"P{index}", "target": {"node": "route"}}
            for index in range(MAX_TRANSITIONS + 1)
        ]
    ),
    "transition-not-an-object": lambda m: m["transitions"].append(["load", "*", "route"]),
    "transition-with-extra-key": _set_transition(0, priority=1),
    "transition-without-pattern": lambda m: m["transitions"][0].pop("pattern"),
    "dangling-source": _set_transition(0, source="nowhere"),
    "dangling-target": _set_transition(0, target={"node": "nowhere"}),
    "pattern-empty": _set_transition(0, pattern=""),
    "pattern-too-long": _set_transition(0, pattern="P" * 65),
    "pattern-not-a-string": _set_transition(0, pattern=1),
    "target-both": _set_transition(0, target={"node": "route", "terminal": "STOP"}),
    "target-neither": _set_transition(0, target={}),
    "target-unknown-terminal": _set_transition(0, target={"terminal": "END"}),
    "target-lower-case-terminal": _set_transition(0, target={"terminal": "complete"}),
    "target-not-an-object": _set_transition(0, target="route"),
    "target-node-not-a-string": _set_transition(0, target={"node": 3}),
}


@pytest.mark.parametrize("shape", list(MALFORMED))
def test_a_malformed_plan_is_invalid_manifest(shape):
    assert len(valid()["nodes"]) == 5  # "too-many-nodes" adds MAX_NODES - 4 → MAX_NODES + 1
    with pytest.raises(InvalidManifest):
        FlowPlan.from_manifest(with_(MALFORMED[shape]))


@pytest.mark.parametrize("bad", ["", " route", "n" * 129, "a\x00b"])
def test_an_invalid_target_node_name_is_invalid_manifest(bad):
    with pytest.raises(InvalidManifest):
        FlowPlan.from_manifest(with_(_set_transition(0, target={"node": bad})))


# -------------------------------------------------------------------------- patterns


@pytest.mark.parametrize(
    ("pattern", "outcome", "matches"),
    [
        ("*", "COMPLETED", True),
        ("*", "A", True),
        ("COMPLETED", "COMPLETED", True),
        ("COMPLETED", "COMPLETED_WITH_SKIPS", False),
        ("COMPLETED", "completed", False),
        ("C*", "CANCELLED", True),
        ("C*", "C", True),
        ("C*", "XC", False),
        ("*ED", "FAILED", True),
        ("*ED", "FAILED_X", False),
        ("C?MPLETED", "COMPLETED", True),
        ("C?MPLETED", "CMPLETED", False),
        ("C?MPLETED", "COOMPLETED", False),
        ("???", "ABC", True),
        ("???", "AB", False),
        ("caf?", "café", True),
        ("A.B", "A.B", True),
        ("A.B", "AXB", False),
        ("[AB]", "[AB]", True),
        ("[AB]", "A", False),
        ("A+", "A+", True),
        ("A+", "AA", False),
        ("(A|B)", "A", False),
        ("^A$", "^A$", True),
        ("A\\d", "A\\d", True),
        ("A\\d", "A1", False),
        ("A{2}", "AA", False),
        ("*.*", "A.B", True),
        ("*.*", "AB", False),
    ],
)
def test_patterns_know_only_star_and_question_mark(pattern, outcome, matches):
    assert (pattern_regex(pattern).fullmatch(outcome) is not None) is matches


def test_the_exact_pattern_wins_over_every_wildcard_in_any_order():
    assert chosen(plan_of("*", "COMPLETED", "C*", "C?MPLETED"), "COMPLETED") == "t1"
    assert chosen(plan_of("C?MPLETED", "C*", "*", "COMPLETED"), "COMPLETED") == "t3"


def test_fewer_wildcards_win():
    """contract §2.3.5's own rule (Spring Batch would prefer `C??CELLED`, a pattern without `*`,
    and `**` over `*`; the contract's "fewer wildcards" decides here)."""
    assert chosen(plan_of("C??*", "C*"), "CANCELLED") == "t1"
    assert chosen(plan_of("*", "C??CELLED"), "CANCELLED") == "t0"  # 1 wildcard vs 2
    assert chosen(plan_of("**", "*"), "CANCELLED") == "t1"


def test_an_outcome_only_the_catch_all_matches_goes_there():
    assert chosen(plan_of("*", "COMPLETED", "C*", "C?MPLETED"), "FAILED") == "t0"


def test_a_complete_tie_goes_to_the_first_listed_transition():
    assert chosen(plan_of("A*", "*B"), "AB") == "t0"
    assert chosen(plan_of("*B", "A*"), "AB") == "t0"


def test_a_more_specific_wildcard_listed_first_wins():
    assert chosen(plan_of("C*", "*"), "CANCELLED") == "t0"


def test_the_catch_all_listed_first_does_not_beat_a_prefix_pattern():
    assert chosen(plan_of("*", "COMPLETED", "C*", "C?MPLETED"), "CANCELLED") == "t2"


def test_a_question_mark_pattern_beats_a_star_pattern():
    assert chosen(plan_of("*", "C*", "C?MPLETED"), "COMPLETED") == "t2"


def test_no_matching_transition_or_unknown_source_has_no_target():
    plan = plan_of("COMPLETED")
    assert chosen(plan, "FAILED") is None
    assert plan.target_for("t0", "COMPLETED") is None
    assert plan.target_for("nowhere", "COMPLETED") is None


# --------------------------------------------------------------------------- targets


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"node": "publish"}, FlowTarget(node="publish")),
        ({"terminal": "COMPLETE"}, FlowTarget(terminal=TerminalKind.COMPLETE)),
        ({"terminal": "FAIL"}, FlowTarget(terminal=TerminalKind.FAIL)),
        ({"terminal": "STOP"}, FlowTarget(terminal=TerminalKind.STOP)),
    ],
)
def test_a_target_is_a_node_or_a_terminal(raw, expected):
    target = FlowTarget.from_json(raw)
    assert target == expected
    assert target.as_json() == raw


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"node": "a", "terminal": "STOP"},
        {"node": None},
        {"node": 1},
        {"terminal": None},
        {"terminal": "complete"},
        {"terminal": "END"},
        {"terminal": ["STOP"]},
        {"target": "a"},
        ["node", "a"],
        "COMPLETE",
        None,
    ],
)
def test_any_other_target_shape_is_invalid_manifest(raw):
    with pytest.raises(InvalidManifest):
        FlowTarget.from_json(raw)


def test_a_target_node_is_a_valid_node_id():
    with pytest.raises(EmptyName):
        FlowTarget.from_json({"node": ""})


@pytest.mark.parametrize(
    "fields", [{}, {"node": "a", "terminal": TerminalKind.STOP}], ids=["neither", "both"]
)
def test_a_target_is_exactly_one_of_node_or_terminal(fields):
    with pytest.raises(ValueError, match="exactly one"):
        FlowTarget(**fields)


# --------------------------------------------------------------- requests and checks


def request(**fields: Any) -> FlowDecisionRequest:
    values: dict[str, Any] = {
        "job_execution_id": 1,
        "source_node_id": "load",
        "kind": FlowTransitionKind.STEP_EXIT,
        "observed_outcome": "COMPLETED",
        "target": FlowTarget(node="route"),
        "plan_fingerprint": DIGEST,
        "input_digest": INPUT,
        "source_step_execution_id": 7,
    }
    values.update(fields)
    return FlowDecisionRequest(**values)


@pytest.mark.parametrize("digest", ["A" * 64, "a" * 63, "a" * 65, "g" * 64, ""])
@pytest.mark.parametrize("field", ["plan_fingerprint", "input_digest"])
def test_request_digests_are_64_lowercase_hex(field, digest):
    with pytest.raises(InvalidCharacters):
        request(**{field: digest})


def test_request_names_are_validated():
    with pytest.raises(EmptyName):
        request(source_node_id="")
    with pytest.raises(EmptyName):
        request(observed_outcome="")


def test_a_decision_that_agrees_with_the_plan_passes():
    plan = FlowPlan.from_manifest(valid())
    check_decision_against_plan(plan, DIGEST, request())
    check_decision_against_plan(
        plan,
        DIGEST,
        request(
            source_node_id="route",
            kind=FlowTransitionKind.DECIDER,
            observed_outcome="SKIP",
            target=FlowTarget(terminal=TerminalKind.COMPLETE),
            source_step_execution_id=None,
        ),
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"plan_fingerprint": "c" * 64},
        {"source_node_id": "nowhere"},
        {"kind": FlowTransitionKind.DECIDER},
        {"kind": FlowTransitionKind.SPLIT_AGGREGATE},
        {"source_step_execution_id": None},
        {"target": FlowTarget(node="publish")},
        {"target": FlowTarget(terminal=TerminalKind.COMPLETE)},
        {"source_node_id": "fan", "kind": FlowTransitionKind.SPLIT_AGGREGATE},
        {
            "source_node_id": "gather",
            "kind": FlowTransitionKind.SPLIT_AGGREGATE,
            "observed_outcome": "COMPLETED",
            "target": FlowTarget(terminal=TerminalKind.STOP),
        },
    ],
    ids=[
        "fingerprint",
        "unknown-node",
        "decider-from-step",
        "aggregate-from-step",
        "step-exit-without-step",
        "other-node",
        "terminal-instead-of-node",
        "aggregate-from-split",
        "no-matching-transition",
    ],
)
def test_a_decision_that_disagrees_is_flow_state_corrupt(fields):
    with pytest.raises(FlowStateCorrupt):
        check_decision_against_plan(FlowPlan.from_manifest(valid()), DIGEST, request(**fields))
