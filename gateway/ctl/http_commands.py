"""``gateway queues|exchanges ...`` over the management HTTP API (``--http``)."""
from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request

from gateway.ctl.errors import CommandError
from gateway.ctl.output import emit


class Api:
    def __init__(self, address: str, user: str, password: str, timeout: float = 15.0):
        self.base = address if address.startswith("http") else f"http://{address}"
        self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.timeout = timeout

    def __call__(self, method: str, path: str, body: dict | None = None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + "/api" + path, data=data, method=method,
                                         headers={"authorization": self.auth, "content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            try:
                reason = json.loads(exc.read()).get("reason")
            except ValueError:
                reason = exc.reason
            raise CommandError(f"{method} {path}: HTTP {exc.code}: {reason}") from None
        except urllib.error.URLError as exc:
            raise CommandError(f"cannot reach the HTTP API at {self.base}: {exc.reason}; is the broker running? "
                               f"(--http HOST:PORT)") from None
        return json.loads(raw) if raw.strip() else None


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _arguments(items: list[str] | None) -> dict:
    """``--argument x-max-length=10``: values are JSON when they parse as JSON (numbers, true), else strings."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise CommandError(f"--argument {item!r} is not KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def queues(args, api: Api) -> int:
    vhost, action = _quote(args.vhost), args.queues_command
    if action == "list":
        rows = api("GET", f"/queues/{vhost}")
        emit(rows, ["name", "type", "durable", "messages", "messages_ready", "messages_unacknowledged", "consumers"],
             args.json)
    elif action == "declare":
        api("PUT", f"/queues/{vhost}/{_quote(args.name)}",
            {"durable": not args.transient, "auto_delete": args.auto_delete, "arguments": _arguments(args.argument)})
        emit(api("GET", f"/queues/{vhost}/{_quote(args.name)}"), ["name", "durable", "arguments", "messages"],
             args.json)
    elif action == "purge":
        before = api("GET", f"/queues/{vhost}/{_quote(args.name)}")["messages_ready"]
        api("DELETE", f"/queues/{vhost}/{_quote(args.name)}/contents")
        emit({"name": args.name, "purged": before}, ["name", "purged"], args.json)
    elif action == "delete":
        api("DELETE", f"/queues/{vhost}/{_quote(args.name)}")
        emit({"name": args.name, "deleted": True}, ["name", "deleted"], args.json)
    return 0


def exchanges(args, api: Api) -> int:
    vhost, action = _quote(args.vhost), args.exchanges_command
    if action == "list":
        rows = [x for x in api("GET", f"/exchanges/{vhost}") if x["name"]]
        emit(rows, ["name", "type", "durable", "auto_delete", "internal"], args.json)
    elif action == "declare":
        api("PUT", f"/exchanges/{vhost}/{_quote(args.name)}",
            {"type": args.type, "durable": not args.transient, "auto_delete": args.auto_delete,
             "internal": args.internal, "arguments": _arguments(args.argument)})
        emit(api("GET", f"/exchanges/{vhost}/{_quote(args.name)}"), ["name", "type", "durable", "arguments"],
             args.json)
    elif action == "delete":
        api("DELETE", f"/exchanges/{vhost}/{_quote(args.name)}")
        emit({"name": args.name, "deleted": True}, ["name", "deleted"], args.json)
    elif action == "bindings":
        rows = [b for b in api("GET", f"/bindings/{vhost}") if b["source"] == args.name]
        emit(rows, ["source", "destination", "destination_type", "routing_key"], args.json)
    return 0


def run(args) -> int:
    api = Api(args.http, args.user, args.password)
    return {"queues": queues, "exchanges": exchanges}[args.command](args, api)
