"""A comparison as text: the verdict, the reasons, and one table per bucket."""

from __future__ import annotations

from advisor.verify.comparison import Comparison
from advisor.verify.differences import fmt_pct, fmt_value


def render_text(c: Comparison) -> str:
    """Plain-text report for the CLI: verdict, reasons, load check, one table per bucket."""
    lines = [
        f"Verdict: {c.verdict.upper()}",
        f"  A: {c.a_source}",
        f"  B: {c.b_source}",
        f"  target: {', '.join(c.targets) if c.targets else 'all metrics'}",
        "",
    ]
    lines += [f"- {r}" for r in c.reasons]
    lines.append("")
    lines.append("Load: " + ("same" if c.load.same else "DIFFERENT: " + "; ".join(c.load.differences)))
    if c.overall is None:
        return "\n".join(lines) + "\n"
    lines.append(c.bucket_note)
    lines.append("Per-bucket throughput is not meaningful within one run: buckets report request counts.")
    sections = [("overall", c.overall)]
    if not (len(c.buckets) == 1 and c.buckets[0].label == "all"):
        sections += [(f"prompts {bk.label} tokens", bk) for bk in c.buckets]
    for title, bk in sections:
        lines.append("")
        lines.append(
            f"[{title}] requests A={bk.n_a} B={bk.n_b}"
            + (" (insufficient)" if bk.status != "ok" else "")
            + (f": {bk.verdict.upper()}" if bk.verdict is not None else "")
        )
        rows = [("metric", "A", "B", "change", "interval", "")]
        for d in bk.metrics.values():
            ci = (
                "-"
                if d.ci_low is None and d.ci_high is None
                else f"{fmt_pct(d.ci_low)}..{fmt_pct(d.ci_high)}"
            )
            mark = {"better": "better", "worse": "WORSE"}.get(
                d.direction, "" if d.status == "ok" else d.status
            )
            rows.append(
                (
                    d.spec.label,
                    fmt_value(d.a, d.spec.unit),
                    fmt_value(d.b, d.spec.unit),
                    fmt_pct(d.change) if d.change is not None else "-",
                    ci,
                    mark,
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        lines += ["  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in rows]
    return "\n".join(lines) + "\n"
