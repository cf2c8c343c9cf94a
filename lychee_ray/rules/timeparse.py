"""Rule-based time: source timestamps, time expressions in text, question windows.

Role in the pipeline:
- read: `lychee_ray.dates.parse_source_datetime` (the absolute-date half of this parser) turns LoCoMo / LongMemEval / ISO session stamps into datetimes;
- encode (`llm.backend: rules`): `find_time_expressions` finds relative and absolute time
  expressions in an utterance and resolves them against the session date, so a record can say
  "yesterday (7 May 2023)" and carry a `NormalizedTime`;
- plan: `resolve_question_window` gives the time filter of a question.

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

import calendar
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Callable

from lychee_ray.dates import (
    DMY_RE,
    MDY_RE,
    MONTH,
    MONTH_NAMES,
    WD_FULL,
    Y,
    as_date,
    month_num,
    safe_date,
)
from lychee_ray.schemas import NormalizedTime

_WEEKDAY_NUM = {"monday": 0, "tuesday": 1, "wednesday": 2, "thursday": 3, "friday": 4, "saturday": 5, "sunday": 6,
                "mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4, "sat": 5, "sun": 6}  # fmt: skip
_NUM_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20,
    "thirty": 30, "forty": 40, "fifty": 50, "couple": 2, "few": 3, "several": 3,
}  # fmt: skip
_ORDINALS = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4, "4th": 4, "last": -1, "final": -1}
_SEASON_START = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}
# "sun", "sat", "wed", "mon" are words too: short forms only count capitalized.
_WD_ANY = WD_FULL + r"|(?:tues|thurs|thur|fri)(?![a-z])\.?|(?-i:Mon|Tue|Wed|Thu|Sat|Sun)(?![a-z])\.?"
_NUM = (
    r"(?:\d{1,3}|a\s+couple(?:\s+of)?|couple(?:\s+of)?|a\s+few|few|several|an?|one|two|three|four|five"
    r"|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen"
    r"|nineteen|twenty|thirty|forty|fifty)"
)
_UNITS_AFTER_YEAR = (
    r"%|percent|dollars?|bucks|calories|miles?|km|kilometers?|meters?|metres?|feet|ft|pounds?|lbs|kg"
    r"|people|steps|words|points|followers|members|subscribers|views|likes|copies|pieces|units|times"
    r"|hours|minutes|seconds|yards|sq|square|k\b"
)

_I = re.IGNORECASE
_ISO_RE = re.compile(r"(?<![\d/-])(?P<y>\d{4})[-/](?P<m>\d{1,2})[-/](?P<d>\d{1,2})(?![\d/-])")
_US_RE = re.compile(r"(?<![\d/])(?P<m>\d{1,2})/(?P<d>\d{1,2})/(?P<y>\d{4})(?![\d/])")
_ORDINAL_DAY_RE = re.compile(r"\bon\s+the\s+(?P<d>\d{1,2})(?:st|nd|rd|th)\b(?!\s+of\b|\s*[-–]|\s+(?:century|centuries|anniversary|birthday|floor|place|time|grade|street|avenue)\b)", _I)
_MONTH_YEAR_RE = re.compile(rf"\b(?P<m>{MONTH}),?\s*{Y}", _I)
_MONTH_CTX_RE = re.compile(
    r"\b(?P<pre>in|during|since|by|until|till|through|throughout|last|this|next|early|late|mid-?"
    r"|(?:the\s+)?(?:end|beginning|start|middle)\s+of|around|before|after|from)\s+"
    rf"(?P<m>{MONTH})(?![\w-])(?!\s*,?\s*\d)",
    _I,
)
_YEAR_RE = re.compile(rf"(?<![\w$£€#.,/'-]){Y}(?![\w%/-]|[.,]\d|\s*(?:{_UNITS_AFTER_YEAR})\b)", _I)
_SEASON_RE = re.compile(
    r"\b(?:(?P<pre>last|this\s+past|past|this\s+coming|this|next|coming)\s+)?(?:the\s+)?"
    rf"(?P<s>spring|summer|fall|autumn|winter)(?:\s+(?:of\s+)?{Y})?",
    _I,
)
_ORD_WEEK_RE = re.compile(
    r"\b(?:the\s+)?(?P<ord>first|1st|second|2nd|third|3rd|fourth|4th|last|final)\s+(?P<u>week|weekend)\s+(?:of|in)\s+"
    rf"(?P<m>{MONTH})(?:,?\s*{Y})?",
    _I,
)
_RELDAY_RE = re.compile(
    r"\b(?:(?P<m2>(?:the\s+)?day\s+before\s+yesterday)|(?P<p2>(?:the\s+)?day\s+after\s+tomorrow)"
    r"|(?P<m1>yesterday|last\s+night)|(?P<z>today|tonight|this\s+(?:morning|afternoon|evening))|(?P<p1>tomorrow))\b",
    _I,
)
_REL_UNIT_RE = re.compile(
    r"\b(?P<pre>this\s+past|the\s+past|the\s+last|this\s+coming|the\s+coming|last|this|next|past|coming|over\s+the)\s+"
    r"(?P<u>week|weekend|month|year)\b(?!\s+of\b)",
    _I,
)
_AGO_RE = re.compile(rf"\b(?P<n>{_NUM})\s+(?P<u>day|week|weekend|month|year)s?\s+ago\b", _I)
_IN_N_RE = re.compile(
    rf"\b(?:in\s+(?P<n>{_NUM})\s+(?P<u>day|week|month|year)s?\b(?!\s+(?:ago|old|before|after))"
    rf"|(?P<n2>{_NUM})\s+(?P<u2>day|week|month|year)s?\s+from\s+now\b)",
    _I,
)
_DURATION_RE = re.compile(
    rf"\b(?:for\s+(?:the\s+(?:past|last)\s+)?(?P<n>{_NUM})\s+(?P<u>year|month|week|day)s?\b(?!\s+(?:old|ago))"
    rf"|(?P<n2>{_NUM})\s+(?P<u2>year|month)s?\s+now\b)",
    _I,
)
_WD_REL_RE = re.compile(
    rf"\b(?P<pre>this\s+past|this\s+coming|last|this|next|past|coming)\s+(?P<wd>{_WD_ANY})"
    r"(?:\s+(?:morning|afternoon|evening|night))?(?![a-z])",
    _I,
)
_WD_ON_RE = re.compile(
    rf"\b(?:on\s+(?P<wd>{WD_FULL})(?![a-z])|(?P<wd2>{WD_FULL})\s+(?:morning|afternoon|evening|night)\b)", _I
)
# Looked for just before an absolute day: "the week before 9 June 2023", "two weekends before ...".
_BEFORE_DAY_RE = re.compile(
    rf"(?:\b(?P<n>{_NUM})\s+(?P<u>day|week|weekend|month)s?|(?:\bthe\s+)?\b(?P<k>day|night|week|weekend|month|{WD_FULL}))"
    r"\s+(?P<dir>before|after|of)\s+(?:the\s+)?$",
    _I,
)
_SINCE_RE = re.compile(r"\bsince\s+$", _I)
_PERFECT_RE = re.compile(r"\b(?:have|has|had|'ve|been|known)\b", _I)
_FUTURE_RE = re.compile(
    r"(?:\b(?:will|won't|shall|gonna|upcoming|tomorrow|soon|intend|intending)\b|'ll\b"
    r"|\b(?:am|is|are|'m|'re)\s+(?:going\s+to|planning|hoping|about\s+to|thinking\s+(?:about|of))"
    r"|\bplan(?:s|ning)?\s+(?:to|on)\b|\bhop(?:e|ing)\s+to\b|\blooking\s+forward\b|\bcan't\s+wait\b)",
    _I,
)
_SENT_END = re.compile(r"[.!?\n]")
_BEFORE_MOD_RE = re.compile(r"\b(?:before|prior\s+to|until|till|by)\s+(?:the\s+)?$", _I)
_AFTER_MOD_RE = re.compile(r"\b(?:after|since|from)\s+(?:the\s+)?$", _I)


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


def _num(text: str) -> int:
    t = text.lower().split()
    if t[0].isdigit():
        return int(t[0])
    return _NUM_WORDS[t[-1] if t[-1] != "of" else t[-2]] if t[0] in ("a", "couple") and len(t) > 1 else _NUM_WORDS[t[0]]


def _month_span(y: int, m: int) -> tuple[date, date]:
    return date(y, m, 1), date(y, m, calendar.monthrange(y, m)[1])


def _shift_month(y: int, m: int, k: int) -> tuple[int, int]:
    idx = y * 12 + (m - 1) + k
    return idx // 12, idx % 12 + 1


def _add_months(d: date, k: int) -> date:
    y, m = _shift_month(d.year, d.month, k)
    return date(y, m, min(d.day, calendar.monthrange(y, m)[1]))


def _week_of(d: date) -> tuple[date, date]:
    monday = d - timedelta(days=d.weekday())
    return monday, monday + timedelta(days=6)


def _weekend_before(d: date) -> tuple[date, date]:
    """The Saturday-Sunday that ended strictly before d."""
    back = (d.weekday() + 1) % 7 or 7  # days back to the previous Sunday
    sunday = d - timedelta(days=back)
    return sunday - timedelta(days=1), sunday


def _weekend_after(d: date) -> tuple[date, date]:
    """The first Saturday-Sunday that starts strictly after d."""
    saturday = d + timedelta(days=(5 - d.weekday()) % 7 or 7)
    return saturday, saturday + timedelta(days=1)


def _weekend_of(d: date) -> tuple[date, date]:
    """The weekend of d's Mon-Sun week (d itself when d is on a weekend)."""
    saturday = d - timedelta(days=d.weekday()) + timedelta(days=5)
    return saturday, saturday + timedelta(days=1)


def _weekday_before(d: date, wd: int) -> date:
    return d - timedelta(days=(d.weekday() - wd) % 7 or 7)


def _weekday_after(d: date, wd: int) -> date:
    return d + timedelta(days=(wd - d.weekday()) % 7 or 7)


def _season_span(season: str, start_year: int) -> tuple[date, date]:
    m0 = _SEASON_START[season]
    y2, m2 = _shift_month(start_year, m0, 2)
    return date(start_year, m0, 1), _month_span(y2, m2)[1]


# --------------------------------------------------------------------------------------------
# Labels: how a resolved date is written into a record (each one parses back to itself)
# --------------------------------------------------------------------------------------------
def format_day(d: date) -> str:
    return f"{d.day} {MONTH_NAMES[d.month - 1]} {d.year}"


def _range_label(s: date, e: date) -> str:
    if s == e:
        return format_day(s)
    if (s.year, s.month) == (e.year, e.month):
        return f"{s.day}-{e.day} {MONTH_NAMES[s.month - 1]} {s.year}"
    return f"{format_day(s)} to {format_day(e)}"


def _label(s: date, e: date, gran: str, kind: str = "") -> str:
    if kind == "weekend":
        return f"the weekend of {format_day(s)}"
    if kind == "week":
        return f"the week of {format_day(s)}"
    if gran == "month" and (s.year, s.month) == (e.year, e.month):
        return f"{MONTH_NAMES[s.month - 1]} {s.year}"
    if gran == "year" and s == date(s.year, 1, 1) and e == date(s.year, 12, 31):
        return str(s.year)
    return _range_label(s, e)


# --------------------------------------------------------------------------------------------
# Matching
# --------------------------------------------------------------------------------------------
@dataclass
class _Hit:
    start: int
    end: int
    s: date
    e: date
    gran: str
    relative: bool
    label: str
    day_like: bool = False  # an absolute day: may be the target of "the week before <day>"
    widened: bool = False  # grown to the left by _relative_to_day or _apply_since


def _hit(m: re.Match, s: date, e: date, gran: str, relative: bool, kind: str = "", label: str | None = None, day_like: bool = False) -> _Hit:
    return _Hit(m.start(), m.end(), s, e, gran, relative, label or _label(s, e, gran, kind), day_like)


def _is_future(text: str, start: int, end: int) -> bool:
    """Does the sentence around text[start:end] speak of the future?"""
    left = max((m.end() for m in _SENT_END.finditer(text, 0, start)), default=0)
    right_m = _SENT_END.search(text, end)
    right = right_m.start() if right_m else len(text)
    return bool(_FUTURE_RE.search(text, left, right))


def _sentence_has(rx: re.Pattern, text: str, start: int, end: int) -> bool:
    left = max((m.end() for m in _SENT_END.finditer(text, 0, start)), default=0)
    right_m = _SENT_END.search(text, end)
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


def _day_date(m: re.Match, text: str, anchor: date | None, month: int | None = None) -> _Hit | None:
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
        y, mo = _shift_month(y, mo, step)
    return None


def _p_month_year(m, text, anchor):
    s, e = _month_span(int(m["y"]), month_num(m["m"]))
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
    s, e = _month_span(y, mo)
    if pre == "since":
        return _hit(m, s, max(anchor, s), "month", True, label=f"since {MONTH_NAMES[mo - 1]} {y}")
    return _hit(m, s, e, "month", True)


def _p_year(m, text, anchor):
    y = int(m["y"])
    return _hit(m, date(y, 1, 1), date(y, 12, 31), "year", False)


def _p_season(m, text, anchor):
    season, pre = m["s"].lower(), " ".join((m["pre"] or "").lower().split())
    if m["y"]:
        s, e = _season_span(season, int(m["y"]))
        return _hit(m, s, e, "month", False, label=f"{season} {m['y']}")
    if not pre or anchor is None:
        return None
    this_year = anchor.year - 1 if season == "winter" and anchor.month <= 2 else anchor.year
    if pre in ("last", "past", "this past"):
        y = this_year if _season_span(season, this_year)[1] < anchor else this_year - 1
    elif pre == "this":
        y = this_year
    else:  # next, coming, this coming: the first one that starts after the anchor
        y = this_year if _season_span(season, this_year)[0] > anchor else this_year + 1
    s, e = _season_span(season, y)
    return _hit(m, s, e, "month", True, label=f"{season} {y}")


def _p_ord_week(m, text, anchor):
    mo = month_num(m["m"])
    if m["y"]:
        y = int(m["y"])
    elif anchor is not None:
        y = _year_for(mo, 1, anchor, _is_future(text, m.start(), m.end()))
    else:
        return None
    first, last = _month_span(y, mo)
    k = _ORDINALS[m["ord"].lower()]
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
            s, e = _weekend_before(anchor)
        elif pre == "this":
            s, e = _weekend_of(anchor)
        elif pre == "next":
            s, e = (d + timedelta(days=7) for d in _weekend_of(anchor))
        else:
            s, e = _weekend_after(anchor)
        return _hit(m, s, e, "week", True, kind="weekend")
    if pre in ("the past", "the last", "this past", "past", "over the"):  # a rolling window up to the anchor
        back = {"week": anchor - timedelta(days=7), "month": _add_months(anchor, -1), "year": _add_months(anchor, -12)}[unit]
        return _hit(m, back, anchor, unit, True)
    step = {"last": -1, "this": 0, "next": 1}.get(pre, 1)  # coming, this coming, the coming: +1
    if unit == "week":
        s, e = _week_of(anchor + timedelta(days=7 * step))
        return _hit(m, s, e, "week", True, kind="week")
    if unit == "month":
        s, e = _month_span(*_shift_month(anchor.year, anchor.month, step))
        return _hit(m, s, e, "month", True)
    y = anchor.year + step
    return _hit(m, date(y, 1, 1), date(y, 12, 31), "year", True)


def _unit_span(unit: str, d: date) -> tuple[date, date, str]:
    """The calendar unit that holds day d."""
    if unit == "day":
        return d, d, ""
    if unit == "week":
        return (*_week_of(d), "week")
    if unit == "month":
        return (*_month_span(d.year, d.month), "")
    return date(d.year, 1, 1), date(d.year, 12, 31), ""


def _shift(unit: str, d: date, n: int) -> date:
    if unit in ("day", "week"):
        return d + timedelta(days=n * (7 if unit == "week" else 1))
    return _add_months(d, n * (12 if unit == "year" else 1))


def _p_ago(m, text, anchor):
    if anchor is None:
        return None
    n, unit = _num(m["n"]), m["u"].lower()
    if unit == "weekend":
        s, e = (d - timedelta(days=7 * (n - 1)) for d in _weekend_before(anchor))
        return _hit(m, s, e, "week", True, kind="weekend")
    s, e, kind = _unit_span(unit, _shift(unit, anchor, -n))
    return _hit(m, s, e, unit, True, kind=kind)


def _p_in_n(m, text, anchor):
    if anchor is None:
        return None
    n, unit = _num(m["n"] or m["n2"]), (m["u"] or m["u2"]).lower()
    s, e, kind = _unit_span(unit, _shift(unit, anchor, n))
    return _hit(m, s, e, unit, True, kind=kind)


def _p_duration(m, text, anchor):
    if anchor is None:
        return None
    if m["n"] and (not _sentence_has(_PERFECT_RE, text, m.start(), m.end()) or _is_future(text, m.start(), m.end())):
        return None  # "I was sick for 2 days" says nothing about when
    n, unit = _num(m["n"] or m["n2"]), (m["u"] or m["u2"]).lower()
    s = _unit_span(unit, _shift(unit, anchor, -n))[0]  # "for 4 years" on 2023-06-09: since 2019-01-01
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
    pre, wd = " ".join(m["pre"].lower().split()), _WEEKDAY_NUM[m["wd"].rstrip(".").lower()]
    if pre in ("last", "past", "this past"):
        d = _weekday_before(anchor, wd)
    elif pre == "this":
        d = _week_of(anchor)[0] + timedelta(days=wd)
    elif pre == "next":
        d = _week_of(anchor)[0] + timedelta(days=7 + wd)
    else:
        d = _weekday_after(anchor, wd)
    return _hit(m, d, d, "day", True)


def _p_wd_on(m, text, anchor):
    if anchor is None:
        return None
    wd = _WEEKDAY_NUM[(m["wd"] or m["wd2"]).lower()]
    future = _is_future(text, m.start(), m.end())
    d = _weekday_after(anchor, wd) if future else _weekday_before(anchor, wd)
    return _hit(m, d, d, "day", True)


_Handler = Callable[[re.Match, str, "date | None"], "_Hit | None"]
_PATTERNS: tuple[tuple[re.Pattern, _Handler], ...] = (
    (DMY_RE, _p_dmy),
    (MDY_RE, _p_dmy),
    (_ISO_RE, _p_numeric),
    (_US_RE, _p_numeric),
    (_ORD_WEEK_RE, _p_ord_week),
    (_ORDINAL_DAY_RE, _p_ordinal_day),
    (_MONTH_YEAR_RE, _p_month_year),
    (_MONTH_CTX_RE, _p_month_ctx),
    (_SEASON_RE, _p_season),
    (_YEAR_RE, _p_year),
    (_RELDAY_RE, _p_relday),
    (_REL_UNIT_RE, _p_rel_unit),
    (_AGO_RE, _p_ago),
    (_IN_N_RE, _p_in_n),
    (_DURATION_RE, _p_duration),
    (_WD_REL_RE, _p_wd_rel),
    (_WD_ON_RE, _p_wd_on),
)
# Cheap gate: a sentence with none of these cannot hold a time expression.
_GATE_RE = re.compile(
    r"\d|yesterday|today|tonight|tomorrow|night|morning|afternoon|evening|week|month|year|ago|day"
    r"|spring|summer|fall|autumn|winter|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec"
    r"|mon|tue|wed|thu|fri|sat|sun",
    _I,
)


def _relative_to_day(h: _Hit, text: str) -> _Hit:
    """Widen an absolute day into "the week before <day>", "two weekends before <day>", ..."""
    lb = _BEFORE_DAY_RE.search(text, max(0, h.start - 40), h.start)
    if not lb or lb.end() != h.start:
        return h
    d = h.s
    direction = lb["dir"].lower()
    start = lb.start()
    if lb["n"]:
        n, unit = _num(lb["n"]), lb["u"].lower()
        if direction == "of":
            return h
        sign = -1 if direction == "before" else 1
        if unit == "weekend":
            base = _weekend_before(d) if sign < 0 else _weekend_after(d)
            s, e = (x + timedelta(days=7 * sign * (n - 1)) for x in base)
            return _Hit(start, h.end, s, e, "week", h.relative, _label(s, e, "week", "weekend"), widened=True)
        s, e, kind = _unit_span(unit, _shift(unit, d, sign * n))
        return _Hit(start, h.end, s, e, unit, h.relative, _label(s, e, unit, kind), widened=True)
    k = lb["k"].lower()
    if k in ("day", "night"):
        s = d if direction == "of" else d + timedelta(days=-1 if direction == "before" else 1)
        return _Hit(start, h.end, s, s, "day", h.relative, format_day(s), widened=True)
    if k == "week":
        s, e = _week_of(d + timedelta(days={"before": -7, "after": 7, "of": 0}[direction]))
        return _Hit(start, h.end, s, e, "week", h.relative, _label(s, e, "week", "week"), widened=True)
    if k == "weekend":
        s, e = {"before": _weekend_before, "after": _weekend_after}.get(direction, _weekend_of_day)(d)
        return _Hit(start, h.end, s, e, "week", h.relative, _label(s, e, "week", "weekend"), widened=True)
    if k == "month":
        s, e = _month_span(*_shift_month(d.year, d.month, {"before": -1, "after": 1, "of": 0}[direction]))
        return _Hit(start, h.end, s, e, "month", h.relative, _label(s, e, "month"), widened=True)
    wd = _WEEKDAY_NUM[k]
    if direction == "of":
        return h
    s = _weekday_before(d, wd) if direction == "before" else _weekday_after(d, wd)
    return _Hit(start, h.end, s, s, "day", h.relative, format_day(s), widened=True)


def _weekend_of_day(d: date) -> tuple[date, date]:
    if d.weekday() == 6:
        return d - timedelta(days=1), d
    return _weekend_of(d)


def _apply_since(h: _Hit, text: str, anchor: date | None) -> _Hit:
    lb = _SINCE_RE.search(text, max(0, h.start - 8), h.start)
    if not lb or lb.end() != h.start or h.label.startswith("since"):
        return h
    end = anchor if anchor is not None and anchor >= h.s else h.e
    return _Hit(lb.start(), h.end, h.s, end, h.gran, h.relative, f"since {h.label}", widened=True)


def _select(hits: list[_Hit], widened_first: bool = False) -> list[_Hit]:
    """Leftmost-longest, non-overlapping, back in text order. With widened_first, a hit grown
    by "the week before <day>" beats the shorter ones it now overlaps ("last week before ...")."""
    order = sorted(hits, key=lambda h: ((not h.widened) if widened_first else False, h.start, h.start - h.end))
    chosen: list[_Hit] = []
    for h in order:
        if all(h.end <= c.start or h.start >= c.end for c in chosen):
            chosen.append(h)
    return sorted(chosen, key=lambda h: h.start)


def _find_hits(text: str, anchor: date | None) -> list[_Hit]:
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
        for h in _find_hits(text, a)
    ]


def resolve_question_window(question: str, question_date: date | datetime | str | None) -> tuple[str | None, str | None] | None:
    """The time window a question asks about, as ISO (start, end), or None when it names no
    time. "before X" / "until X" open the start (None), "after X" opens the end; "since X"
    runs to the question date. Several expressions give their union."""
    a = as_date(question_date)
    hits = _find_hits(question or "", a)
    if not hits:
        return None
    starts: list[date | None] = []
    ends: list[date | None] = []
    for h in hits:
        s, e = h.s, h.e
        if _BEFORE_MOD_RE.search(question, max(0, h.start - 12), h.start):
            s, e = None, h.s - timedelta(days=1)
        elif h.label.startswith("since"):
            e = a if a is not None and a >= h.s else None
        elif _AFTER_MOD_RE.search(question, max(0, h.start - 8), h.start):
            s, e = h.e + timedelta(days=1), None
        starts.append(s)
        ends.append(e)
    start = None if any(s is None for s in starts) else min(starts)
    end = None if any(e is None for e in ends) else max(ends)
    return (start.isoformat() if start else None, end.isoformat() if end else None)
