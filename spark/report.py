"""The stats report as one self-contained HTML page with inline SVG charts (no pyspark here).

Why HTML + hand-drawn SVG rather than matplotlib PNGs: it adds no dependency to the
``spark`` extra (matplotlib and its wheels are larger than the code that needs them), it
opens in any browser with nothing beside it, the charts stay sharp at any zoom, and its
text can be checked in tests. A PNG can always be had from a browser's screenshot.
"""
from __future__ import annotations

import html
from datetime import datetime, timezone

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
WIDTH, HEIGHT, PAD = 760, 260, 48


def _esc(value) -> str:
    return html.escape(str(value))


def _ts(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        value = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


def _number(n) -> str:
    return f"{n:,}" if isinstance(n, int) else f"{n:,.2f}"


def _table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def rate_chart(series: dict[str, list[tuple[datetime, float]]]) -> str:
    """Records per second per minute, one line per topic, as an SVG element."""
    points = [p for line in series.values() for p in line]
    if not points:
        return "<p>No records.</p>"
    t0 = min(t for t, _ in points).timestamp()
    t1 = max(t for t, _ in points).timestamp()
    top = max(v for _, v in points) or 1.0
    span = (t1 - t0) or 60.0

    def x(t: datetime) -> float:
        return PAD + (t.timestamp() - t0) / span * (WIDTH - 2 * PAD)

    def y(v: float) -> float:
        return HEIGHT - PAD + 10 - v / top * (HEIGHT - 2 * PAD)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="records per second by minute">',
             f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>']
    for i in range(5):  # horizontal grid with the rate it stands for
        v = top * i / 4
        parts.append(f'<line x1="{PAD}" x2="{WIDTH - PAD}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{PAD - 6}" y="{y(v) + 4:.1f}" font-size="11" text-anchor="end">{v:,.0f}</text>')
    for t, anchor in ((t0, "start"), (t1, "end")):
        label = datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M")
        parts.append(f'<text x="{PAD if anchor == "start" else WIDTH - PAD}" y="{HEIGHT - 12}" font-size="11" '
                     f'text-anchor="{anchor}">{label} UTC</text>')
    for i, (topic, line) in enumerate(sorted(series.items())):
        color = PALETTE[i % len(PALETTE)]
        line = sorted(line)
        if len(line) == 1:
            t, v = line[0]
            parts.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="{color}"/>')
        else:
            coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in line)
            parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        parts.append(f'<rect x="{PAD + 8}" y="{8 + 16 * i}" width="10" height="10" fill="{color}"/>'
                     f'<text x="{PAD + 22}" y="{17 + 16 * i}" font-size="12">{_esc(topic)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def count_bars(by_topic: list[dict]) -> str:
    """Records per topic as horizontal bars."""
    if not by_topic:
        return ""
    top = max(r["records"] for r in by_topic) or 1
    row_h, label_w = 22, 220
    height = row_h * len(by_topic) + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="records per topic">']
    for i, r in enumerate(by_topic):
        w = (WIDTH - label_w - 90) * r["records"] / top
        yy = 5 + i * row_h
        parts.append(f'<text x="{label_w - 6}" y="{yy + 14}" font-size="12" text-anchor="end">{_esc(r["topic"])}</text>'
                     f'<rect x="{label_w}" y="{yy + 2}" width="{w:.1f}" height="{row_h - 6}" '
                     f'fill="{PALETTE[i % len(PALETTE)]}"/>'
                     f'<text x="{label_w + w + 6:.1f}" y="{yy + 14}" font-size="12">{r["records"]:,}</text>')
    parts.append("</svg>")
    return "".join(parts)


def render(title: str, source: str, by_topic: list[dict], top_keys: list[dict], per_minute: list[dict]) -> str:
    """The whole page. Rows are plain dicts as the stats job collects them (spark/stats.py)."""
    series: dict[str, list] = {}
    for r in per_minute:
        series.setdefault(r["topic"], []).append((r["minute"], r["records_per_second"]))
    topic_rows = [[r["topic"], _number(r["records"]), _number(r["bytes"]), _number(r["keys"]),
                   _ts(r["first_timestamp"]), _ts(r["last_timestamp"]), _number(r["records_per_second"])]
                  for r in by_topic]
    key_rows = [[r["topic"], r["key_text"], _number(r["records"]), _number(r["bytes"]),
                 _ts(r["first_timestamp"]), _ts(r["last_timestamp"])] for r in top_keys]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}
th:first-child, td:first-child, td:nth-child(2) {{ text-align: left; }}
th {{ background: #f3f3f3; }}
.note {{ color: #666; font-size: 13px; }}
</style></head><body>
<h1>{_esc(title)}</h1>
<p class="note">Source: {_esc(source)}. Generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} UTC.
Bytes are key + value bytes; rates are records per second, averaged over each minute (UTC).</p>
<h2>Topics</h2>
{count_bars(by_topic)}
{_table(["topic", "records", "bytes", "distinct keys", "first", "last", "records/s overall"], topic_rows)}
<h2>Records per second, by minute</h2>
{rate_chart(series)}
<h2>Busiest keys</h2>
{_table(["topic", "key", "records", "bytes", "first", "last"], key_rows)}
</body></html>
"""
