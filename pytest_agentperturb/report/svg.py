"""Inline SVG plots for the HTML report, drawn by hand (no plotting dependency).

Every label passes through :func:`esc`; numbers are formatted here, so an
SVG string can be embedded in the page as is.  Output is deterministic.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any


def esc(x: Any) -> str:
    """HTML/XML-escape anything (quotes included)."""
    return html.escape(str(x), quote=True)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(float(v))


def diverging(v: float, vmax: float = 100.0) -> str:
    """Red for a drop (positive), green for a gain, grey for missing."""
    if not _finite(v):
        return "#eeeeee"
    a = max(0.0, min(1.0, abs(v) / vmax))
    base = (200, 40, 40) if v > 0 else (40, 140, 60)
    r, g, b = (round(255 - (255 - c) * a) for c in base)
    return f"#{r:02x}{g:02x}{b:02x}"


def heatmap(values: Sequence[Sequence[float]], rows: Sequence[str], cols: Sequence[str], *,
            title: str = "", unit: str = "%", vmax: float = 100.0,
            intervals: Sequence[Sequence[tuple[float, float]]] | None = None,
            links: Sequence[Sequence[str | None]] | None = None,
            whys: Sequence[Sequence[str]] | None = None) -> str:
    """A labelled grid of coloured cells with the value (and interval) printed in each.

    ``links`` (if given) holds a URL per cell (or None): the cell becomes a
    link to it (e.g. ``#fail-...``, the cell's episodes in the failures list).
    ``whys`` (if given) says per cell why its value is undefined: such a cell
    reads ``n/a`` and, under it, ``(why)`` (its tooltip the whole line).
    """
    cw, ch, left, top = 120, 46 if intervals or whys else 34, 92, 44 if title else 24
    w, h = left + cw * len(cols) + 8, top + ch * len(rows) + 8
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' viewBox='0 0 {w} {h}' "
           f"role='img' aria-label='{esc(title or 'heatmap')}' font-family='sans-serif' font-size='12'>"]
    if title:
        out.append(f"<text x='4' y='16' font-weight='bold'>{esc(title)}</text>")
    for j, c in enumerate(cols):
        out.append(f"<text x='{left + cw * j + cw / 2:.0f}' y='{top - 6}' text-anchor='middle'>{esc(c)}</text>")
    for i, r in enumerate(rows):
        y = top + ch * i
        out.append(f"<text x='{left - 6}' y='{y + ch / 2 + 4:.0f}' text-anchor='end'>{esc(r)}</text>")
        for j in range(len(cols)):
            v = values[i][j]
            x = left + cw * j
            link = links[i][j] if links is not None else None
            why = whys[i][j] if whys is not None and not _finite(v) else ""
            tip = f": n/a ({why})" if why else ""
            if link:
                out.append(f"<a href='{esc(link)}'><title>{esc(r)} x {esc(cols[j])}{esc(tip)}: its episodes</title>")
            elif why:
                out.append(f"<g><title>{esc(r)} x {esc(cols[j])}{esc(tip)}</title>")
            out.append(f"<rect x='{x}' y='{y}' width='{cw - 2}' height='{ch - 2}' fill='{diverging(v, vmax)}'/>")
            label = f"{v:.1f}{unit}" if _finite(v) else "n/a"
            dark = _finite(v) and abs(v) > 0.6 * vmax
            colour = "#ffffff" if dark else "#222222"
            out.append(f"<text x='{x + cw / 2 - 1:.0f}' y='{y + 18}' text-anchor='middle' fill='{colour}' "
                       f"font-weight='bold'>{esc(label)}</text>")
            if intervals is not None:
                lo, hi = intervals[i][j]
                if _finite(lo) and _finite(hi):
                    out.append(f"<text x='{x + cw / 2 - 1:.0f}' y='{y + 35}' text-anchor='middle' "
                               f"fill='{colour}' font-size='10'>[{lo:.0f}, {hi:.0f}]</text>")
            if why:
                out.append(f"<text x='{x + cw / 2 - 1:.0f}' y='{y + 35}' text-anchor='middle' "
                           f"fill='{colour}' font-size='10'>({esc(why)})</text>")
            if link:
                out.append("</a>")
            elif why:
                out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def dot_intervals(items: Sequence[tuple[str, float, float, float]], *, title: str = "", unit: str = "%",
                  lo_bound: float | None = None, hi_bound: float | None = None) -> str:
    """Horizontal dot plot: one row per (label, estimate, low, high), with a zero line."""
    vals = [v for _, e, lo, hi in items for v in (e, lo, hi) if _finite(v)]
    if not items:
        return ""
    vmin = min([0.0, *vals]) if lo_bound is None else lo_bound
    vmax = max([1.0, *vals]) if hi_bound is None else hi_bound
    if vmax - vmin < 1e-9:
        vmax = vmin + 1.0
    left, width, rh, top = 210, 380, 20, 30 if title else 12
    h = top + rh * len(items) + 26
    w = left + width + 70

    def sx(v: float) -> float:
        return left + (v - vmin) / (vmax - vmin) * width

    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' viewBox='0 0 {w} {h}' "
           f"role='img' aria-label='{esc(title or 'estimates with intervals')}' font-family='sans-serif' "
           "font-size='11'>"]
    if title:
        out.append(f"<text x='4' y='16' font-weight='bold' font-size='12'>{esc(title)}</text>")
    if vmin <= 0 <= vmax:
        out.append(f"<line x1='{sx(0):.1f}' x2='{sx(0):.1f}' y1='{top}' y2='{top + rh * len(items)}' "
                   "stroke='#999' stroke-dasharray='3,3'/>")
    for i, (label, est, lo, hi) in enumerate(items):
        y = top + rh * i + rh / 2
        out.append(f"<text x='{left - 8}' y='{y + 4:.0f}' text-anchor='end'>{esc(label)}</text>")
        if _finite(lo) and _finite(hi):
            out.append(f"<line x1='{sx(lo):.1f}' x2='{sx(hi):.1f}' y1='{y:.0f}' y2='{y:.0f}' stroke='#555' "
                       "stroke-width='2'/>")
        if _finite(est):
            out.append(f"<circle cx='{sx(est):.1f}' cy='{y:.0f}' r='4' fill='#b22'/>")
            out.append(f"<text x='{left + width + 8}' y='{y + 4:.0f}'>{est:.1f}{esc(unit)}</text>")
    yb = top + rh * len(items) + 14
    import numpy as np   # here: the task pages (esc only) load without numpy

    for v in np.linspace(vmin, vmax, 5):
        out.append(f"<text x='{sx(float(v)):.1f}' y='{yb}' text-anchor='middle' fill='#666'>{v:.0f}</text>")
    out.append("</svg>")
    return "".join(out)


def correlation_matrix(labels: Sequence[str], rho: Any, *, title: str = "", linkage: Any = None) -> str:
    """A square correlation matrix in the given (clustering) order, with a dendrogram on top."""
    k = len(labels)
    if k == 0:
        return ""
    cs, left = 30, 150
    dend_h = 60 if linkage is not None and len(linkage) else 0
    top = (24 if title else 6) + dend_h
    w, h = left + cs * k + 90, top + cs * k + 130
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' viewBox='0 0 {w} {h}' "
           f"role='img' aria-label='{esc(title or 'correlation matrix')}' font-family='sans-serif' "
           "font-size='11'>"]
    if title:
        out.append(f"<text x='4' y='16' font-weight='bold' font-size='12'>{esc(title)}</text>")
    if dend_h:
        import numpy as np

        out.append(_dendrogram(np.asarray(linkage, dtype=float), k, left, cs, top - 4, dend_h - 8))
    for i in range(k):
        out.append(f"<text x='{left - 6}' y='{top + cs * i + cs / 2 + 4:.0f}' text-anchor='end'>"
                   f"{esc(labels[i])}</text>")
        x = left + cs * i + cs / 2
        yl = top + cs * k + 6
        out.append(f"<text x='{x:.0f}' y='{yl}' transform='rotate(60 {x:.0f} {yl})'>{esc(labels[i])}</text>")
        for j in range(k):
            v = float(rho[i][j])
            out.append(f"<rect x='{left + cs * j}' y='{top + cs * i}' width='{cs - 1}' height='{cs - 1}' "
                       f"fill='{diverging(v, 1.0) if i != j else '#dddddd'}'>"
                       f"<title>{esc(labels[i])} / {esc(labels[j])}: "
                       f"{'n/a' if not _finite(v) else f'{v:.2f}'}</title></rect>")
            if i != j and _finite(v):
                out.append(f"<text x='{left + cs * j + cs / 2 - 1:.0f}' y='{top + cs * i + cs / 2 + 4:.0f}' "
                           f"text-anchor='middle' font-size='9'>{v:.2f}</text>")
    out.append("</svg>")
    return "".join(out)


def _dendrogram(z: Any, k: int, left: float, cs: float, base: float, height: float) -> str:
    """Dendrogram of a linkage matrix (:func:`~..analysis.cluster.average_linkage`) over its leaves' order."""
    from ..analysis.cluster import leaves

    order = leaves(z)
    pos: dict[int, tuple[float, float]] = {leaf: (left + cs * order.index(leaf) + cs / 2, 0.0) for leaf in range(k)}
    hmax = float(z[:, 2].max()) if len(z) and z[:, 2].max() > 0 else 1.0
    parts = []
    for n, (a, b, d, _) in enumerate(z):
        (xa, ha), (xb, hb) = pos[int(a)], pos[int(b)]
        ya, yb, yd = (base - height * hh / hmax for hh in (ha, hb, float(d)))
        parts.append(f"<path d='M{xa:.1f},{ya:.1f}V{yd:.1f}H{xb:.1f}V{yb:.1f}' fill='none' stroke='#555'/>")
        pos[k + n] = ((xa + xb) / 2, float(d))
    return "".join(parts)


_PALETTE = ("#b22222", "#1f5fa8", "#2e8b57", "#8a4fbf", "#d2691e", "#008b8b", "#666666", "#c71585")


def trend_chart(series: Sequence[tuple[str, Sequence[tuple[float, float, float]]]], runs: Sequence[str], *,
                title: str = "", unit: str = "%") -> str:
    """A small line chart: one line per series over the runs, each point (estimate, low, high) with a whisker."""
    if not runs or not series:
        return ""
    vals = [v for _, pts in series for p in pts for v in p if _finite(v)]
    vmin, vmax = min([0.0, *vals]), max([1.0, *vals])
    if vmax - vmin < 1e-9:
        vmax = vmin + 1.0
    left, top, width, height = 48, 28 if title else 10, max(160, 70 * len(runs)), 150
    legend = 18 * len(series)
    w, h = left + width + 24, top + height + 60 + legend

    def sx(i: int) -> float:
        return left + (width * (i + 0.5) / len(runs))

    def sy(v: float) -> float:
        return top + height - (v - vmin) / (vmax - vmin) * height

    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' viewBox='0 0 {w} {h}' role='img' "
           f"aria-label='{esc(title or 'trend')}' font-family='sans-serif' font-size='11'>"]
    if title:
        out.append(f"<text x='4' y='16' font-weight='bold' font-size='12'>{esc(title)}</text>")
    out.append(f"<line x1='{left}' x2='{left}' y1='{top}' y2='{top + height}' stroke='#999'/>")
    import numpy as np   # here: the task pages (esc only) load without numpy

    for v in np.linspace(vmin, vmax, 5):
        y = sy(float(v))
        out.append(f"<line x1='{left - 3}' x2='{left + width}' y1='{y:.1f}' y2='{y:.1f}' stroke='#eee'/>"
                   f"<text x='{left - 6}' y='{y + 4:.1f}' text-anchor='end' fill='#666'>{v:.0f}{esc(unit)}</text>")
    for i, run in enumerate(runs):
        out.append(f"<text x='{sx(i):.1f}' y='{top + height + 16}' text-anchor='middle'>{esc(run)}</text>")
    for k, (label, pts) in enumerate(series):
        colour = _PALETTE[k % len(_PALETTE)]
        line = [(sx(i), sy(e)) for i, (e, _, _) in enumerate(pts) if _finite(e)]
        if len(line) > 1:
            out.append(f"<polyline fill='none' stroke='{colour}' stroke-width='1.5' points='"
                       + " ".join(f"{x:.1f},{y:.1f}" for x, y in line) + "'/>")
        for i, (e, lo, hi) in enumerate(pts):
            if _finite(lo) and _finite(hi):
                out.append(f"<line x1='{sx(i):.1f}' x2='{sx(i):.1f}' y1='{sy(lo):.1f}' y2='{sy(hi):.1f}' "
                           f"stroke='{colour}' stroke-opacity='0.6'/>")
            if _finite(e):
                out.append(f"<circle cx='{sx(i):.1f}' cy='{sy(e):.1f}' r='3.5' fill='{colour}'>"
                           f"<title>{esc(label)} · {esc(runs[i])}: {e:.1f}{esc(unit)}</title></circle>")
        y = top + height + 36 + 18 * k
        out.append(f"<rect x='{left}' y='{y - 9}' width='10' height='10' fill='{colour}'/>"
                   f"<text x='{left + 16}' y='{y}'>{esc(label)}</text>")
    out.append("</svg>")
    return "".join(out)


def five_numbers(values: Sequence[float]) -> tuple[float, float, float, float, float] | None:
    """(min, Q1, median, Q3, max) of the finite values (linear interpolation), None when there are none."""
    v = sorted(float(x) for x in values if _finite(x))
    if not v:
        return None

    def q(p: float) -> float:
        k = (len(v) - 1) * p
        lo = math.floor(k)
        hi = min(lo + 1, len(v) - 1)
        return v[lo] + (v[hi] - v[lo]) * (k - lo)

    return v[0], q(0.25), q(0.5), q(0.75), v[-1]


CLEAN_COLOUR, PERTURBED_COLOUR = "#1f5fa8", "#b22222"


def box_pairs(rows: Sequence[tuple[str, Sequence[float], Sequence[float]]], *, title: str = "",
              unit: str = "") -> str:
    """Paired horizontal box plots: per row (label, clean values, perturbed values), clean above perturbed.

    Each box spans Q1-Q3 with the median marked and whiskers to min and
    max; the medians are printed on the right.  One shared linear axis from 0.
    """
    stats = [(label, five_numbers(c), five_numbers(p), len(c), len(p)) for label, c, p in rows]
    if not stats:
        return ""
    vmax = max([1.0, *(s[4] for _, c, p, _, _ in stats for s in (c, p) if s is not None)])
    left, width, rh, top = 190, 380, 30, 46 if title else 26
    w, h = left + width + 130, top + rh * len(stats) + 28

    def sx(v: float) -> float:
        return left + v / vmax * width

    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' viewBox='0 0 {w} {h}' role='img' "
           f"aria-label='{esc(title or 'distributions')}' font-family='sans-serif' font-size='11'>"]
    if title:
        out.append(f"<text x='4' y='16' font-weight='bold' font-size='12'>{esc(title)}</text>")
    ly = top - 10
    out.append(f"<rect x='{left}' y='{ly - 8}' width='10' height='8' fill='{CLEAN_COLOUR}'/>"
               f"<text x='{left + 14}' y='{ly}'>clean (the same tasks)</text>"
               f"<rect x='{left + 170}' y='{ly - 8}' width='10' height='8' fill='{PERTURBED_COLOUR}'/>"
               f"<text x='{left + 184}' y='{ly}'>perturbed</text>"
               f"<text x='{left + width + 8}' y='{ly}' fill='#666'>median</text>")
    import numpy as np   # here: the task pages (esc only) load without numpy

    for v in np.linspace(0.0, vmax, 5):
        x = sx(float(v))
        out.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{top}' y2='{top + rh * len(stats)}' stroke='#eee'/>"
                   f"<text x='{x:.1f}' y='{top + rh * len(stats) + 14}' text-anchor='middle' fill='#666'>"
                   f"{esc(_short(float(v)))}</text>")
    for i, (label, c, p, nc, npert) in enumerate(stats):
        y0 = top + rh * i
        out.append(f"<text x='{left - 8}' y='{y0 + rh / 2 + 4:.0f}' text-anchor='end'>{esc(label)}</text>")
        meds = []
        for k, (s, n, colour, name) in enumerate(((c, nc, CLEAN_COLOUR, "clean"),
                                                   (p, npert, PERTURBED_COLOUR, "perturbed"))):
            y = y0 + 4 + 12 * k
            if s is None:
                meds.append("–")
                continue
            mn, q1, md, q3, mx = s
            tip = (f"{label} · {name}: n={n}, min {_short(mn)}, Q1 {_short(q1)}, median {_short(md)}, "
                   f"Q3 {_short(q3)}, max {_short(mx)}{unit}")
            out.append(f"<g><title>{esc(tip)}</title>"
                       f"<line x1='{sx(mn):.1f}' x2='{sx(mx):.1f}' y1='{y + 5}' y2='{y + 5}' stroke='{colour}'/>"
                       f"<rect x='{sx(q1):.1f}' y='{y}' width='{max(1.0, sx(q3) - sx(q1)):.1f}' height='10' "
                       f"fill='{colour}' fill-opacity='0.35' stroke='{colour}'/>"
                       f"<line x1='{sx(md):.1f}' x2='{sx(md):.1f}' y1='{y - 1}' y2='{y + 11}' stroke='{colour}' "
                       "stroke-width='2.5'/></g>")
            meds.append(_short(md))
        out.append(f"<text x='{left + width + 8}' y='{y0 + rh / 2 + 4:.0f}'>"
                   f"<tspan fill='{CLEAN_COLOUR}'>{esc(meds[0])}</tspan> → "
                   f"<tspan fill='{PERTURBED_COLOUR}'>{esc(meds[1])}</tspan></text>")
    out.append("</svg>")
    return "".join(out)


def _short(v: float) -> str:
    """A number in few characters: 12, 3.5, 12.3k, 1.2M."""
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.1f}M"
    if a >= 1e4:
        return f"{v / 1e3:.0f}k"
    if a >= 1e3:
        return f"{v / 1e3:.1f}k"
    if a >= 10 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.2f}" if a < 1 else f"{v:.1f}"
