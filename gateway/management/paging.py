"""The query parameters of RabbitMQ's list endpoints: ``columns``, ``sort``, ``sort_reverse``,
``name`` + ``use_regex`` and ``page`` + ``page_size``.

Without ``page`` a list stays a plain JSON array (what rabbitmqadmin and most scripts read);
with it the answer is RabbitMQ's page object (``items``, ``page``, ``page_count``,
``page_size``, ``filtered_count``, ``item_count``, ``total_count``). ``columns`` keeps the
named keys of each item; a dotted name (``message_stats.publish``) keeps a nested one.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

MAX_PAGE_SIZE = 500  # RabbitMQ's ceiling


class PagingError(ValueError):
    """A query parameter that cannot be applied; the message names it."""


def _arg(args: Mapping[bytes, list[bytes]], name: str) -> str | None:
    values = args.get(name.encode())
    return values[-1].decode("utf-8", "replace") if values else None


def _lookup(item: Any, path: list[str]) -> Any:
    for key in path:
        if not isinstance(item, dict) or key not in item:
            return None
        item = item[key]
    return item


def _sort_key(value: Any) -> tuple:
    """Mixed types sort as RabbitMQ shows them: missing first, then numbers, then text."""
    if value is None:
        return (0, 0, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (1, value, "")
    return (2, 0, str(value).lower() if isinstance(value, str) else str(value))


def _only_columns(item: Any, columns: list[list[str]]) -> Any:
    if not isinstance(item, dict):
        return item
    out: dict = {}
    for path in columns:
        value = _lookup(item, path)
        if value is None and not (len(path) == 1 and path[0] in item):
            continue
        target = out
        for key in path[:-1]:
            target = target.setdefault(key, {})
        target[path[-1]] = value
    return out


def apply(items: list, args: Mapping[bytes, list[bytes]]) -> Any:
    """``items`` shaped by the request's query parameters (``request.args``)."""
    total = len(items)
    name = _arg(args, "name")
    if name:
        if (_arg(args, "use_regex") or "false").lower() == "true":
            try:
                pattern = re.compile(name)
            except re.error as exc:
                raise PagingError(f"name={name!r} is not a regular expression: {exc}") from None
            items = [i for i in items if isinstance(i, dict) and pattern.search(str(i.get("name", "")))]
        else:
            items = [i for i in items if isinstance(i, dict) and name in str(i.get("name", ""))]
    sort = _arg(args, "sort")
    reverse = (_arg(args, "sort_reverse") or "false").lower() == "true"
    if sort:
        path = sort.split(".")
        items = sorted(items, key=lambda i: _sort_key(_lookup(i, path)), reverse=reverse)
    elif reverse:
        items = list(reversed(items))
    columns = _arg(args, "columns")
    if columns:
        paths = [c.strip().split(".") for c in columns.split(",") if c.strip()]
        items = [_only_columns(i, paths) for i in items]
    page_text = _arg(args, "page")
    if page_text is None:
        return items
    try:
        page = int(page_text)
        size = int(_arg(args, "page_size") or "100")
    except ValueError:
        raise PagingError("page and page_size must be whole numbers") from None
    if page < 1 or not 1 <= size <= MAX_PAGE_SIZE:
        raise PagingError(f"page must be at least 1 and page_size between 1 and {MAX_PAGE_SIZE}")
    filtered = len(items)
    page_count = max((filtered + size - 1) // size, 1) if filtered else 0
    if filtered and page > page_count:
        raise PagingError(f"page {page} is past the last page ({page_count})")
    chunk = items[(page - 1) * size: page * size]
    return {"filtered_count": filtered, "item_count": len(chunk), "items": chunk, "page": page,
            "page_count": page_count, "page_size": size, "total_count": total}
