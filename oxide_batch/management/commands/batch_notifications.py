"""``manage.py batch_notifications ACTION``: add, list, disable, enable, remove, test,
rotate, deliveries, redeliver, prune —
who hears what (issue 41, docs/notifications.md).

``add --name N --jobs GLOB[,GLOB…] --events K1,K2 (--webhook URL [--secret
whsec_…] [--format standard|slack] | --email ADDR,…)``: without ``--secret`` a
webhook's secret is generated and printed once; the destination is sealed at
rest and never shown again (``list`` shows its hint). Every change is audited
with ``--actor`` (default ``cli:<login>``). Exit codes as every command's: 2 an
invalid field, 4 no such rule.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from oxide_batch.domain.evidence import instant_text
from oxide_batch.domain.notifications import EventKind
from oxide_batch.domain.retention import MAX_BATCH_BOUND
from oxide_batch.management.commands._cli import OxideCommand, duration_arg
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.selectors.notifications import DeliveryView, deliveries, rules
from oxide_batch.services.notify_retention import NotificationRetention
from oxide_batch.services.notify_rules import NotificationRules, new_rule


def _list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _delivery_json(view: DeliveryView) -> dict[str, Any]:
    return {
        "id": view.id,
        "webhook_id": view.webhook_id,
        "rule": view.rule,
        "kind": view.kind,
        "job_name": view.job_name,
        "job_execution_id": view.job_execution_id,
        "state": view.state,
        "attempts": view.attempts,
        "next_attempt_at": instant_text(view.next_attempt_at),
        "last_error": view.last_error,
    }


class Command(OxideCommand):
    help = "Add, list, disable, enable, remove or test notification rules (audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        add = actions.add_parser("add", help="add a rule (a generated secret is printed once)")
        add.add_argument("--name", required=True)
        add.add_argument(
            "--jobs", required=True, metavar="GLOB,…", help="job-name patterns (* any, ? one)"
        )
        add.add_argument(
            "--events", required=True, metavar="K1,K2", help=f"kinds: {', '.join(EventKind)}"
        )
        where = add.add_mutually_exclusive_group(required=True)
        where.add_argument("--webhook", metavar="URL")
        where.add_argument("--email", metavar="ADDR,…")
        add.add_argument("--secret", metavar="whsec_…", help="default: generated, printed once")
        add.add_argument("--format", choices=("standard", "slack"), default="standard")
        listing = actions.add_parser("list", help="list rules (never a destination's secret)")
        named = [
            actions.add_parser(action, help=f"{action} a rule")
            for action in ("disable", "enable", "remove", "test")
        ]
        for subparser in named:
            subparser.add_argument("name")
        rotate = actions.add_parser("rotate", help="seal every destination under the first key")
        shown = actions.add_parser("deliveries", help="the newest deliveries, with their errors")
        shown.add_argument("--state", choices=("pending", "delivered", "dead"))
        again = actions.add_parser("redeliver", help="attempt a dead delivery again (audited)")
        again.add_argument("delivery", type=int, metavar="DELIVERY_ID")
        prune = actions.add_parser(
            "prune", help="delete settled deliveries, events and alarms older than an age"
        )
        prune.add_argument(
            "--older-than", type=duration_arg, required=True, metavar="AGE", help="e.g. 30d"
        )
        prune.add_argument("--batch-size", type=int, default=MAX_BATCH_BOUND)
        prune.add_argument("--dry-run", action="store_true", help="only count")
        for subparser in (add, listing, rotate, shown, again, prune, *named):
            subparser.add_argument("--json", action="store_true", help="print one JSON object")
            if subparser not in (listing, shown, prune):
                subparser.add_argument("--actor", help="the audit's actor (default cli:<login>)")
            self.json_usage_errors(subparser)

    def handle(self, *args: Any, **options: Any) -> None:
        self.read_only = options["action"] in ("list", "deliveries") or bool(options.get("dry_run"))
        self.verbosity = int(options["verbosity"])
        super().handle(*args, **options)

    def run(self, **options: Any) -> dict[str, Any]:
        self.action = action = options["action"]
        if action == "list":
            return {"rules": [view.document() for view in rules()]}
        if action == "deliveries":
            return {"deliveries": [_delivery_json(d) for d in deliveries(state=options["state"])]}
        if action == "prune":
            result = NotificationRetention().prune(
                older_than=options["older_than"],
                batch_size=options["batch_size"],
                dry_run=options["dry_run"],
            )
            return {
                "cutoff": instant_text(result.cutoff),
                "dry_run": result.dry_run,
                "counts": result.counts,
            }
        actor = self.actor(options)
        by = ChangeBy(actor.reference, actor.user_id)
        service = NotificationRules()
        if action == "add":
            rule = new_rule(
                name=options["name"],
                jobs=_list(options["jobs"]),
                events=_list(options["events"]),
                webhook=options["webhook"],
                secret=options["secret"],
                format=options["format"],
                email=None if options["email"] is None else _list(options["email"]),
            )
            rule_id = service.add(rule, by=by)
            return {
                "id": rule_id,
                "name": rule.name,
                "destination": rule.destination.value,
                "hint": rule.hint,
                # Shown this once: a generated secret only (a given one the caller has).
                "secret": rule.secret if rule.secret_generated else None,
            }
        if action == "rotate":
            return {"resealed": service.rotate(by=by)}
        if action == "redeliver":
            service.redeliver(options["delivery"], by=by)
            return {"delivery": options["delivery"], "state": "pending"}
        name = options["name"]
        if action == "test":
            attempt = service.test(name, by=by)
            return {"name": name, "outcome": attempt.verdict, "detail": attempt.detail}
        getattr(service, action)(name, by=by)
        return {"name": name, "action": action}

    def render(self, document: dict[str, Any]) -> None:
        if self.action == "add":
            self.stdout.write(
                f"rule {document['name']} added: {document['destination']} {document['hint']}"
            )
            if document["secret"]:
                self.stdout.write(document["secret"])
                self.stderr.write("the webhook's signing secret: shown this once, store it now")
        elif self.action == "list":
            if not document["rules"]:
                self.stdout.write("no rules")
            for rule in document["rules"]:
                state = "enabled" if rule["enabled"] else "disabled"
                self.stdout.write(
                    f"{rule['name']:<24} {state:<8} jobs {','.join(rule['jobs'])}  events "
                    f"{','.join(rule['events'])}  {rule['destination']} {rule['hint']}  "
                    f"pending {rule['pending']} dead {rule['dead']}"
                )
        elif self.action == "test":
            self.stdout.write(
                f"test of {document['name']}: {document['outcome']} ({document['detail']})"
            )
        elif self.action == "deliveries":
            if not document["deliveries"]:
                self.stdout.write("no deliveries")
            for d in document["deliveries"]:
                error = f"  last error: {d['last_error']}" if d["last_error"] else ""
                self.stdout.write(
                    f"{d['id']:>8} {d['state']:<9} {d['rule']:<16} {d['kind']:<22} "
                    f"{d['job_name']} #{d['job_execution_id']}  attempts {d['attempts']}{error}"
                )
        elif self.action == "prune":
            verb = "would delete" if document["dry_run"] else "deleted"
            self.stdout.write(f"notifications settled before {document['cutoff']}: {verb}")
            for table, count in document["counts"].items():
                self.stdout.write(f"  {table:<12}  {count:>10}")
        elif self.action == "redeliver":
            self.stdout.write(f"delivery {document['delivery']}: pending again")
        elif self.action == "rotate":
            self.stdout.write(f"{document['resealed']} destinations sealed under the first key")
        else:
            self.stdout.write(f"rule {document['name']}: {document['action']}d")
