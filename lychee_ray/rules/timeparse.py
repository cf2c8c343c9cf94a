"""Rule-based time: source timestamps, time expressions in text, question windows.

Role in the pipeline:
- read: `lychee_ray.dates.parse_source_datetime` (the absolute-date half of this parser) turns LoCoMo / LongMemEval / ISO session stamps into datetimes;
- encode (`llm.backend: rules`): `find_time_expressions` finds relative and absolute time
  expressions in an utterance and resolves them against the session date, so a record can say
  "yesterday (7 May 2023)" and carry a `NormalizedTime`;
- plan: `rules.planner.resolve_question_window` gives the time filter of a question from `find_hits`.

Pure functions, no I/O, deterministic; every regex is compiled once at import.

Conventions (the anchor is the session date; nothing here looks at the clock):
- A week is Monday-Sunday (ISO). "last week" is the Mon-Sun week before the anchor's week,
  "this week" the anchor's week, "next week" the one after; "N weeks ago" / "in N weeks" is the
  Mon-Sun week that holds anchor -/+ 7N days. All have granularity "week".
- A weekend is Saturday-Sunday (granularity "week"). "last weekend" is the most recent
  Sat-Sun that ended strictly before the anchor (on a Saturday or Sunday anchor that is the
  previous weekend); "this weekend" is the Sat-Sun of the anchor's Mon-Sun week; "next
  weekend" is the one after that; "this coming weekend" is the first Saturday strictly after
  the anchor; "N weekends ago" counts back from "last weekend".
- "last <weekday>" is the most recent such day strictly before the anchor (so "last Saturday"
  on a Saturday is 7 days back). "this <weekday>" is that day in the anchor's Mon-Sun week;
  "next <weekday>" is that day in the following week; "this coming <weekday>" the first one
  strictly after the anchor. "on <weekday>" is the most recent past one, or the next one when
  the sentence speaks of the future (will, 'll, am going to, plan to, ...).
- A month or a day without a year ("in May", "on 5 May") is the most recent one on or before
  the anchor, or the next one on or after it in a future-tense sentence.
- Seasons are northern-hemisphere: spring Mar-May, summer Jun-Aug, fall Sep-Nov, winter
  Dec-Feb; "winter 2022" is Dec 2022-Feb 2023 (granularity "month").
- "a couple of" is 2, "a few" and "several" are 3. "recently", "lately" and "the other day"
  are not resolved (too vague to filter on).
- "since X" spans from the start of X to the anchor; "for N years" in a perfect-tense sentence
  ("I've known them for 4 years") and "N years now" span from the start of the year (month,
  week) N units before the anchor to the anchor.
- "on the 15th" is the most recent 15th on or before the anchor (or the next one, future tense).
- Without an anchor only absolute expressions with an explicit year resolve.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Callable

from lychee_ray.dates import (
    DMY_RE,
    MDY_RE,
    MONTH_NAMES,
    as_date,
    month_num,
    safe_date,
)
from lychee_ray.rules.calendar_spans import (
    add_months,
    count_of,
    format_day,
    month_span,
    season_span,
    shift_by,
    shift_month,
    span_label,
    unit_span,
    week_of,
    weekday_after,
    weekday_before,
    weekend_after,
    weekend_before,
    weekend_of,
)
from lychee_ray.rules.time_patterns import (
    AGO_RE,
    BEFORE_DAY_RE,
    DURATION_RE,
    FUTURE_RE,
    IGNORE_CASE,
    IN_N_RE,
    ISO_RE,
    MONTH_CTX_RE,
    MONTH_YEAR_RE,
    ORDINALS,
    ORDINAL_DAY_RE,
    ORD_WEEK_RE,
    PERFECT_RE,
    RELDAY_RE,
    REL_UNIT_RE,
    SEASON_RE,
    SENT_END,
    SINCE_RE,
    US_RE,
    WD_ON_RE,
    WD_REL_RE,
    WEEKDAY_NUM,
    YEAR_RE,
)
from lychee_ray.schemas import NormalizedTime

@dataclass(frozen=True)
class TimeExpr:
    """One resolved expression. start/end are ISO dates (inclusive); span indexes the text."""

    start: str
    end: str
    granularity: str  # day | week | month | year
    expression: str  # the matched text
    span: tuple[int, int]
    relative: bool  # depends on the anchor (yesterday, last week); absolute dates are False
    label: str  # how to write the date in a record: "7 May 2023", "the week of 29 May 2023"

    def to_normalized(self) -> NormalizedTime:
        return to_normalized(self)


def to_normalized(te: TimeExpr | None) -> NormalizedTime:
    """`TimeExpr` -> the schema's `NormalizedTime`; None -> granularity "none"."""
    if te is None:
        return NormalizedTime(start=None, end=None, granularity="none", expression=None)
    return NormalizedTime(start=te.start, end=te.end, granularity=te.granularity, expression=te.expression)


# --------------------------------------------------------------------------------------------
# Matching
# --------------------------------------------------------------------------------------------
@dataclass
class TimeHit:
    start: int
    end: int
    s: date
    e: date
    gran: str
    relative: bool
    label: str
    day_like: bool = False  # an absolute day: may be the target of "the week before <day>"
    widened: bool = False  # grown to the left by _relative_to_day or _apply_since


def _hit(m: re.Match, s: date, e: date, gran: str, relative: bool, kind: str = "", label: str | None = None, day_like: bool = False) -> TimeHit:
    return TimeHit(m.start(), m.end(), s, e, gran, relative, label or span_label(s, e, gran, kind), day_like)


def _is_future(text: str, start: int, end: int) -> bool:
    """Does the sentence around text[start:end] speak of the future?"""
    left = max((m.end() for m in SENT_END.finditer(text, 0, start)), default=0)
    right_m = SENT_END.search(text, end)
    right = right_m.start() if right_m else len(text)
    return bool(FUTURE_RE.search(text, left, right))


def _sentence_has(rx: re.Pattern, text: str, start: int, end: int) -> bool:
    left = max((m.end() for m in SENT_END.finditer(text, 0, start)), default=0)
    right_m = SENT_END.search(text, end)
    return bool(rx.search(text, left, right_m.start() if right_m else len(text)))


def _year_for(month: int, day: int, anchor: date, future: bool) -> int | None:
    """Year of a yearless month/day: the nearest past one, or the nearest future one."""
    for k in range(0, 9):  # up to 8 years covers 29 February
        y = anchor.year + (k if future else -k)
        d = safe_date(y, month, day)
        if d is None:
            continue
        if (future and d >= anchor) or (not future and d <= anchor):
            return y
    return None


def _day_date(m: re.Match, text: str, anchor: date | None, month: int | None = None) -> TimeHit | None:
    mo = month if month is not None else month_num(m["m"])
    d1 = int(m["d"])
    d2 = int(m["d2"]) if m.groupdict().get("d2") else d1
    if m["y"]:
        y = int(m["y"])
    elif anchor is not None:
        y = _year_for(mo, d1, anchor, _is_future(text, m.start(), m.end()))
        if y is None:
            return None
    else:
        return None
    s, e = safe_date(y, mo, d1), safe_date(y, mo, d2)
    if s is None or e is None or e < s:
        return None
    return _hit(m, s, e, "day", not m["y"], day_like=True)


def _p_dmy(m, text, anchor):
    return _day_date(m, text, anchor)


def _p_numeric(m, text, anchor):
    s = safe_date(int(m["y"]), int(m["m"]), int(m["d"]))
    return _hit(m, s, s, "day", False, day_like=True) if s and 1900 <= s.year <= 2099 else None


def _p_ordinal_day(m, text, anchor):
    if anchor is None:
        return None
    day = int(m["d"])
    if not 1 <= day <= 31:
        return None
    step = 1 if _is_future(text, m.start(), m.end()) else -1
    y, mo = anchor.year, anchor.month
    for _ in range(13):  # the nearest month that has this day, in the right direction
        d = safe_date(y, mo, day)
        if d is not None and (d >= anchor if step > 0 else d <= anchor):
            return _hit(m, d, d, "day", True, day_like=True)
        y, mo = shift_month(y, mo, step)
    return None


def _p_month_year(m, text, anchor):
    s, e = month_span(int(m["y"]), month_num(m["m"]))
    return _hit(m, s, e, "month", False)


def _p_month_ctx(m, text, anchor):
    if anchor is None:
        return None
    mo, pre = month_num(m["m"]), m["pre"].lower()
    if pre == "last":
        y = anchor.year if mo < anchor.month else anchor.year - 1
    elif pre == "next":
        y = anchor.year if mo > anchor.month else anchor.year + 1
    elif pre == "this":
        y = anchor.year
    else:
        future = _is_future(text, m.start(), m.end())
        y = anchor.year + (0 if (mo >= anchor.month if future else mo <= anchor.month) else (1 if future else -1))
    s, e = month_span(y, mo)
    if pre == "since":
        return _hit(m, s, max(anchor, s), "month", True, label=f"since {MONTH_NAMES[mo - 1]} {y}")
    return _hit(m, s, e, "month", True)


def _p_year(m, text, anchor):
    y = int(m["y"])
    return _hit(m, date(y, 1, 1), date(y, 12, 31), "year", False)


def _p_season(m, text, anchor):
    season, pre = m["s"].lower(), " ".join((m["pre"] or "").lower().split())
    if m["y"]:
        s, e = season_span(season, int(m["y"]))
        return _hit(m, s, e, "month", False, label=f"{season} {m['y']}")
    if not pre or anchor is None:
        return None
    this_year = anchor.year - 1 if season == "winter" and anchor.month <= 2 else anchor.year
    if pre in ("last", "past", "this past"):
        y = this_year if season_span(season, this_year)[1] < anchor else this_year - 1
    elif pre == "this":
        y = this_year
    else:  # next, coming, this coming: the first one that starts after the anchor
        y = this_year if season_span(season, this_year)[0] > anchor else this_year + 1
    s, e = season_span(season, y)
    return _hit(m, s, e, "month", True, label=f"{season} {y}")


def _p_ord_week(m, text, anchor):
    mo = month_num(m["m"])
    if m["y"]:
        y = int(m["y"])
    elif anchor is not None:
        y = _year_for(mo, 1, anchor, _is_future(text, m.start(), m.end()))
    else:
        return None
    first, last = month_span(y, mo)
    k = ORDINALS[m["ord"].lower()]
    if m["u"].lower() == "weekend":
        if k > 0:
            sat = first + timedelta(days=(5 - first.weekday()) % 7 + 7 * (k - 1))
        else:
            sat = last - timedelta(days=(last.weekday() - 5) % 7)
        s, e = sat, sat + timedelta(days=1)
    elif k > 0:
        s = first + timedelta(days=7 * (k - 1))
        e = s + timedelta(days=6)
    else:
        s, e = last - timedelta(days=6), last
    return _hit(m, s, e, "week", not m["y"], label=f"the {m['ord'].lower()} {m['u'].lower()} of {MONTH_NAMES[mo - 1]} {y}")


def _p_relday(m, text, anchor):
    if anchor is None:
        return None
    offset = next(v for g, v in (("m2", -2), ("p2", 2), ("m1", -1), ("z", 0), ("p1", 1)) if m[g])
    d = anchor + timedelta(days=offset)
    return _hit(m, d, d, "day", True)


def _p_rel_unit(m, text, anchor):
    if anchor is None:
        return None
    pre, unit = " ".join(m["pre"].lower().split()), m["u"].lower()
    if unit == "weekend":
        if pre == "over the":
            pre = "coming" if _is_future(text, m.start(), m.end()) else "last"
        if pre in ("last", "past", "this past", "the past", "the last"):
            s, e = weekend_before(anchor)
        elif pre == "this":
            s, e = weekend_of(anchor)
        elif pre == "next":
            s, e = (d + timedelta(days=7) for d in weekend_of(anchor))
        else:
            s, e = weekend_after(anchor)
        return _hit(m, s, e, "week", True, kind="weekend")
    if pre in ("the past", "the last", "this past", "past", "over the"):  # a rolling window up to the anchor
        back = {"week": anchor - timedelta(days=7), "month": add_months(anchor, -1), "year": add_months(anchor, -12)}[unit]
        return _hit(m, back, anchor, unit, True)
    step = {"last": -1, "this": 0, "next": 1}.get(pre, 1)  # coming, this coming, the coming: +1
    if unit == "week":
        s, e = week_of(anchor + timedelta(days=7 * step))
        return _hit(m, s, e, "week", True, kind="week")
    if unit == "month":
        s, e = month_span(*shift_month(anchor.year, anchor.month, step))
        return _hit(m, s, e, "month", True)
    y = anchor.year + step
    return _hit(m, date(y, 1, 1), date(y, 12, 31), "year", True)


def _p_ago(m, text, anchor):
    if anchor is None:
        return None
    n, unit = count_of(m["n"]), m["u"].lower()
    if unit == "weekend":
        s, e = (d - timedelta(days=7 * (n - 1)) for d in weekend_before(anchor))
        return _hit(m, s, e, "week", True, kind="weekend")
    s, e, kind = unit_span(unit, shift_by(unit, anchor, -n))
    return _hit(m, s, e, unit, True, kind=kind)


def _p_in_n(m, text, anchor):
    if anchor is None:
        return None
    n, unit = count_of(m["n"] or m["n2"]), (m["u"] or m["u2"]).lower()
    s, e, kind = unit_span(unit, shift_by(unit, anchor, n))
    return _hit(m, s, e, unit, True, kind=kind)


def _p_duration(m, text, anchor):
    if anchor is None:
        return None
    if m["n"] and (not _sentence_has(PERFECT_RE, text, m.start(), m.end()) or _is_future(text, m.start(), m.end())):
        return None  # "I was sick for 2 days" says nothing about when
    n, unit = count_of(m["n"] or m["n2"]), (m["u"] or m["u2"]).lower()
    s = unit_span(unit, shift_by(unit, anchor, -n))[0]  # "for 4 years" on 2023-06-09: since 2019-01-01
    if unit == "year":
        label = f"since {s.year}"
    elif unit == "month":
        label = f"since {MONTH_NAMES[s.month - 1]} {s.year}"
    else:
        label = f"since {format_day(s)}"
    return _hit(m, s, anchor, unit, True, label=label)


def _p_wd_rel(m, text, anchor):
    if anchor is None:
        return None
    pre, wd = " ".join(m["pre"].lower().split()), WEEKDAY_NUM[m["wd"].rstrip(".").lower()]
    if pre in ("last", "past", "this past"):
        d = weekday_before(anchor, wd)
    elif pre == "this":
        d = week_of(anchor)[0] + timedelta(days=wd)
    elif pre == "next":
        d = week_of(anchor)[0] + timedelta(days=7 + wd)
    else:
        d = weekday_after(anchor, wd)
    return _hit(m, d, d, "day", True)


def _p_wd_on(m, text, anchor):
    if anchor is None:
        return None
    wd = WEEKDAY_NUM[(m["wd"] or m["wd2"]).lower()]
    future = _is_future(text, m.start(), m.end())
    d = weekday_after(anchor, wd) if future else weekday_before(anchor, wd)
    return _hit(m, d, d, "day", True)


_Handler = Callable[[re.Match, str, "date | None"], "TimeHit | None"]
_PATTERNS: tuple[tuple[re.Pattern, _Handler], ...] = (
    (DMY_RE, _p_dmy),
    (MDY_RE, _p_dmy),
    (ISO_RE, _p_numeric),
    (US_RE, _p_numeric),
    (ORD_WEEK_RE, _p_ord_week),
    (ORDINAL_DAY_RE, _p_ordinal_day),
    (MONTH_YEAR_RE, _p_month_year),
    (MONTH_CTX_RE, _p_month_ctx),
    (SEASON_RE, _p_season),
    (YEAR_RE, _p_year),
    (RELDAY_RE, _p_relday),
    (REL_UNIT_RE, _p_rel_unit),
    (AGO_RE, _p_ago),
    (IN_N_RE, _p_in_n),
    (DURATION_RE, _p_duration),
    (WD_REL_RE, _p_wd_rel),
    (WD_ON_RE, _p_wd_on),
)
# Cheap gate: a sentence with none of these cannot hold a time expression.
_GATE_RE = re.compile(
    r"\d|yesterday|today|tonight|tomorrow|night|morning|afternoon|evening|week|month|year|ago|day"
    r"|spring|summer|fall|autumn|winter|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec"
    r"|mon|tue|wed|thu|fri|sat|sun",
    IGNORE_CASE,
)


def _relative_to_day(h: TimeHit, text: str) -> TimeHit:
    """Widen an absolute day into "the week before <day>", "two weekends before <day>", ..."""
    lb = BEFORE_DAY_RE.search(text, max(0, h.start - 40), h.start)
    if not lb or lb.end() != h.start:
        return h
    d = h.s
    direction = lb["dir"].lower()
    start = lb.start()
    if lb["n"]:
        n, unit = count_of(lb["n"]), lb["u"].lower()
        if direction == "of":
            return h
        sign = -1 if direction == "before" else 1
        if unit == "weekend":
            base = weekend_before(d) if sign < 0 else weekend_after(d)
            s, e = (x + timedelta(days=7 * sign * (n - 1)) for x in base)
            return TimeHit(start, h.end, s, e, "week", h.relative, span_label(s, e, "week", "weekend"), widened=True)
        s, e, kind = unit_span(unit, shift_by(unit, d, sign * n))
        return TimeHit(start, h.end, s, e, unit, h.relative, span_label(s, e, unit, kind), widened=True)
    k = lb["k"].lower()
    if k in ("day", "night"):
        s = d if direction == "of" else d + timedelta(days=-1 if direction == "before" else 1)
        return TimeHit(start, h.end, s, s, "day", h.relative, format_day(s), widened=True)
    if k == "week":
        s, e = week_of(d + timedelta(days={"before": -7, "after": 7, "of": 0}[direction]))
        return TimeHit(start, h.end, s, e, "week", h.relative, span_label(s, e, "week", "week"), widened=True)
    if k == "weekend":
        s, e = {"before": weekend_before, "after": weekend_after}.get(direction, _weekend_of_day)(d)
        return TimeHit(start, h.end, s, e, "week", h.relative, span_label(s, e, "week", "weekend"), widened=True)
    if k == "month":
        s, e = month_span(*shift_month(d.year, d.month, {"before": -1, "after": 1, "of": 0}[direction]))
        return TimeHit(start, h.end, s, e, "month", h.relative, span_label(s, e, "month"), widened=True)
    wd = WEEKDAY_NUM[k]
    if direction == "of":
        return h
    s = weekday_before(d, wd) if direction == "before" else weekday_after(d, wd)
    return TimeHit(start, h.end, s, s, "day", h.relative, format_day(s), widened=True)


def _weekend_of_day(d: date) -> tuple[date, date]:
    if d.weekday() == 6:
        return d - timedelta(days=1), d
    return weekend_of(d)


def _apply_since(h: TimeHit, text: str, anchor: date | None) -> TimeHit:
    lb = SINCE_RE.search(text, max(0, h.start - 8), h.start)
    if not lb or lb.end() != h.start or h.label.startswith("since"):
        return h
    end = anchor if anchor is not None and anchor >= h.s else h.e
    return TimeHit(lb.start(), h.end, h.s, end, h.gran, h.relative, f"since {h.label}", widened=True)


def _select(hits: list[TimeHit], widened_first: bool = False) -> list[TimeHit]:
    """Leftmost-longest, non-overlapping, back in text order. With widened_first, a hit grown
    by "the week before <day>" beats the shorter ones it now overlaps ("last week before ...")."""
    order = sorted(hits, key=lambda h: ((not h.widened) if widened_first else False, h.start, h.start - h.end))
    chosen: list[TimeHit] = []
    for h in order:
        if all(h.end <= c.start or h.start >= c.end for c in chosen):
            chosen.append(h)
    return sorted(chosen, key=lambda h: h.start)


def find_hits(text: str, anchor: date | None) -> list[TimeHit]:
    if not text or not _GATE_RE.search(text):
        return []
    hits = []
    for rx, handler in _PATTERNS:
        for m in rx.finditer(text):
            h = handler(m, text, anchor)
            if h is not None:
                hits.append(h)
    out = []
    for h in _select(hits):
        if h.day_like:
            h = _relative_to_day(h, text)
        out.append(_apply_since(h, text, anchor))
    return _select(out, widened_first=True)


def find_time_expressions(text: str, anchor: date | datetime | str | None) -> list[TimeExpr]:
    """All time expressions in `text` resolved against `anchor` (the session date), in text
    order, non-overlapping (the longest match wins). See the module docstring for the
    conventions. Unresolvable expressions (relative ones without an anchor) are left out."""
    a = as_date(anchor)
    return [
        TimeExpr(h.s.isoformat(), h.e.isoformat(), h.gran, text[h.start : h.end], (h.start, h.end), h.relative, h.label)
        for h in find_hits(text, a)
    ]
