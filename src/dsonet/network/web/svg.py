"""Inline SVG plots for the node's page: no script, no font or file from elsewhere.

Every text that reaches a plot (a node id, a reason) goes through `html.escape`; colours and
coordinates are numbers this module computes. Presentation attributes only (``fill``, ``stroke``):
the page's Content-Security-Policy allows no inline ``style``.
"""

from __future__ import annotations

from html import escape
from typing import Sequence

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22")


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def line_plot(series: dict[str, Sequence[tuple[float, float]]], *, floor: float | None = None, width: int = 640,
              height: int = 220, label: str = "reputation", y_range: tuple[float, float] = (0.0, 1.0)) -> str:
    """Lines of (x, y) points on shared axes, one colour a series (a legend below); x is time in ms,
    drawn as minutes before the newest point. ``floor``: a dashed line at that y (a threshold)."""
    left, right, top, bottom = 44, 10, 10, 28
    points = [p for s in series.values() for p in s]
    x1 = max((p[0] for p in points), default=1.0)
    x0 = min((p[0] for p in points), default=0.0)
    x0 = x0 if x1 > x0 else x1 - 60_000  # one moment: a minute's width
    y0, y1 = y_range
    w, h = width - left - right, height - top - bottom

    def xy(x: float, y: float) -> str:
        return f"{left + w * (x - x0) / (x1 - x0):.1f},{top + h * (1 - (min(max(y, y0), y1) - y0) / (y1 - y0)):.1f}"

    parts = [f'<svg class="plot" role="img" aria-label="{escape(label)} over time" width="{width}" height="{height}"'
             f' viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
             f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="#fafafa" stroke="#ccc"/>']
    for tick in (y0, (y0 + y1) / 2, y1):
        y = xy(x0, tick).split(",")[1]
        parts.append(f'<text x="{left - 4}" y="{float(y) + 4:.1f}" text-anchor="end" font-size="10">{tick:g}</text>')
    parts.append(f'<text x="{left}" y="{height - 8}" font-size="10">{span(x1 - x0)} before</text>')
    parts.append(f'<text x="{left + w}" y="{height - 8}" font-size="10" text-anchor="end">latest</text>')
    if floor is not None:
        a, b = xy(x0, floor), xy(x1, floor)
        parts.append(f'<line x1="{a.split(",")[0]}" y1="{a.split(",")[1]}" x2="{b.split(",")[0]}" '
                     f'y2="{b.split(",")[1]}" stroke="#999" stroke-dasharray="4 3"><title>floor {floor:g}: '
                     f'peers under it are skipped</title></line>')
    for i, (name, pts) in enumerate(series.items()):
        if not pts:
            continue
        path = " ".join(xy(x, y) for x, y in pts)
        parts.append(f'<polyline class="series" data-series="{escape(name)}" points="{path}" fill="none" '
                     f'stroke="{colour(i)}" stroke-width="1.5"><title>{escape(name)}</title></polyline>')
        cx, cy = xy(*pts[-1]).split(",")
        parts.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="{colour(i)}"/>')
    parts.append("</svg>")
    return "".join(parts)


def sparkline(values: Sequence[float], *, width: int = 120, height: int = 24, colour_: str = PALETTE[0]) -> str:
    """A small line of values in [0, 1] (a peer's reputation, oldest to newest), no axes."""
    if not values:
        return ""
    n = max(len(values) - 1, 1)
    pts = " ".join(f"{width * i / n:.1f},{height - 2 - (height - 4) * min(max(v, 0.0), 1.0):.1f}"
                   for i, v in enumerate(values))
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'xmlns="http://www.w3.org/2000/svg"><polyline points="{pts}" fill="none" stroke="{colour_}" '
            f'stroke-width="1.5"/></svg>')


def bars(rows: Sequence[tuple[str, int, int]], *, width: int = 640, height: int = 160) -> str:
    """Stacked bars, oldest left: (label, admitted, refused) per round, admitted green, refused red."""
    left, top, bottom = 44, 10, 18
    if not rows:
        return ""
    peak = max(max(a + r for _, a, r in rows), 1)
    w, h = width - left - 10, height - top - bottom
    step = w / len(rows)
    parts = [f'<svg class="plot" role="img" aria-label="rows admitted and refused per round" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
             f'<text x="{left - 4}" y="{top + 8}" text-anchor="end" font-size="10">{peak}</text>',
             f'<text x="{left - 4}" y="{top + h}" text-anchor="end" font-size="10">0</text>']
    for i, (name, admitted, refused) in enumerate(rows):
        x = left + i * step
        ha, hr = h * admitted / peak, h * refused / peak
        tip = f"<title>{escape(name)}: {admitted} admitted, {refused} refused</title>"
        parts.append(f'<rect x="{x:.1f}" y="{top + h - ha:.1f}" width="{max(step - 1, 1):.1f}" height="{ha:.1f}" '
                     f'fill="#2ca02c">{tip}</rect>')
        parts.append(f'<rect x="{x:.1f}" y="{top + h - ha - hr:.1f}" width="{max(step - 1, 1):.1f}" '
                     f'height="{hr:.1f}" fill="#d62728">{tip}</rect>')
    parts.append(f'<text x="{left}" y="{height - 4}" font-size="10">oldest</text>'
                 f'<text x="{width - 10}" y="{height - 4}" font-size="10" text-anchor="end">latest round</text></svg>')
    return "".join(parts)


def span(ms: float) -> str:
    """A duration in the largest unit that says it ("45 s", "12 min", "3 h", "2 d")."""
    s = ms / 1000
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.0f} {unit}"
    return f"{s:.0f} s"


def interval_bars(rows: Sequence[tuple[str, float, tuple[float, float] | None]], *, width: int | None = None,
                  height: int = 260, label: str = "accuracy") -> str:
    """One bar a row, (name, value in [0, 1], its 95% interval or None), the interval drawn as a
    whisker, the value written above it as a percentage; names under the bars (``width`` None:
    room for each name, at least 640 px)."""
    width = width or max(640, 54 + 16 + max((7 * len(r[0]) for r in rows), default=0) * len(rows))
    left, top, bottom, right = 44, 14, 40, 10
    w, h = width - left - right, height - top - bottom
    step = w / max(len(rows), 1)

    def y(v: float) -> float:
        return top + h * (1 - min(max(v, 0.0), 1.0))

    parts = [f'<svg class="plot" role="img" aria-label="{escape(label)} per condition, with 95% intervals" '
             f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{left}" x2="{left + w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#e5e5e5"/>'
                     f'<text x="{left - 4}" y="{y(tick) + 4:.1f}" text-anchor="end" font-size="10">{tick:.0%}</text>')
    for i, (name, value, interval) in enumerate(rows):
        x, bw = left + i * step + step * 0.15, step * 0.7
        mid = x + bw / 2
        tip = f"{escape(name)}: {value:.1%}" + (f" [{interval[0]:.1%}, {interval[1]:.1%}]" if interval else "")
        parts.append(f'<rect class="bar" data-name="{escape(name)}" x="{x:.1f}" y="{y(value):.1f}" width="{bw:.1f}" '
                     f'height="{top + h - y(value):.1f}" fill="{colour(i)}"><title>{tip}</title></rect>')
        if interval is not None:
            lo, hi = y(interval[0]), y(interval[1])
            parts.append(f'<path class="interval" d="M{mid:.1f},{lo:.1f}V{hi:.1f}M{mid - 6:.1f},{lo:.1f}h12'
                         f'M{mid - 6:.1f},{hi:.1f}h12" stroke="#222" stroke-width="1.2" fill="none"/>')
        top_y = min(y(value), y(interval[1]) if interval else y(value))
        parts.append(f'<text x="{mid:.1f}" y="{top_y - 4:.1f}" text-anchor="middle" font-size="11">{value:.0%}</text>'
                     f'<text x="{mid:.1f}" y="{top + h + 14:.1f}" text-anchor="middle" font-size="11">'
                     f'{escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)
