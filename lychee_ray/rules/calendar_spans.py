"""Calendar arithmetic of the rules backend's time parser (timeparse.py): month, week, weekend
and season spans, shifts by a unit, the count words ("a couple of"), and how a resolved span is
written into a record ("7 May 2023", "the week of 29 May 2023"; each label parses back to itself).
Pure, no I/O.
"""

from __future__ import annotations

import calendar
from datetime import date, timedelta

from lychee_ray.dates import MONTH_NAMES

NUM_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20,
    "thirty": 30, "forty": 40, "fifty": 50, "couple": 2, "few": 3, "several": 3,
}  # fmt: skip
SEASON_START = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}


def count_of(text: str) -> int:
    t = text.lower().split()
    if t[0].isdigit():
        return int(t[0])
    return NUM_WORDS[t[-1] if t[-1] != "of" else t[-2]] if t[0] in ("a", "couple") and len(t) > 1 else NUM_WORDS[t[0]]


def month_span(y: int, m: int) -> tuple[date, date]:
    return date(y, m, 1), date(y, m, calendar.monthrange(y, m)[1])


def shift_month(y: int, m: int, k: int) -> tuple[int, int]:
    idx = y * 12 + (m - 1) + k
    return idx // 12, idx % 12 + 1


def add_months(d: date, k: int) -> date:
    y, m = shift_month(d.year, d.month, k)
    return date(y, m, min(d.day, calendar.monthrange(y, m)[1]))


def week_of(d: date) -> tuple[date, date]:
    monday = d - timedelta(days=d.weekday())
    return monday, monday + timedelta(days=6)


def weekend_before(d: date) -> tuple[date, date]:
    """The Saturday-Sunday that ended strictly before d."""
    back = (d.weekday() + 1) % 7 or 7  # days back to the previous Sunday
    sunday = d - timedelta(days=back)
    return sunday - timedelta(days=1), sunday


def weekend_after(d: date) -> tuple[date, date]:
    """The first Saturday-Sunday that starts strictly after d."""
    saturday = d + timedelta(days=(5 - d.weekday()) % 7 or 7)
    return saturday, saturday + timedelta(days=1)


def weekend_of(d: date) -> tuple[date, date]:
    """The weekend of d's Mon-Sun week (d itself when d is on a weekend)."""
    saturday = d - timedelta(days=d.weekday()) + timedelta(days=5)
    return saturday, saturday + timedelta(days=1)


def weekday_before(d: date, wd: int) -> date:
    return d - timedelta(days=(d.weekday() - wd) % 7 or 7)


def weekday_after(d: date, wd: int) -> date:
    return d + timedelta(days=(wd - d.weekday()) % 7 or 7)


def season_span(season: str, start_year: int) -> tuple[date, date]:
    m0 = SEASON_START[season]
    y2, m2 = shift_month(start_year, m0, 2)
    return date(start_year, m0, 1), month_span(y2, m2)[1]


# --------------------------------------------------------------------------------------------
# Labels: how a resolved date is written into a record (each one parses back to itself)
def format_day(d: date) -> str:
    return f"{d.day} {MONTH_NAMES[d.month - 1]} {d.year}"


def range_label(s: date, e: date) -> str:
    if s == e:
        return format_day(s)
    if (s.year, s.month) == (e.year, e.month):
        return f"{s.day}-{e.day} {MONTH_NAMES[s.month - 1]} {s.year}"
    return f"{format_day(s)} to {format_day(e)}"


def span_label(s: date, e: date, gran: str, kind: str = "") -> str:
    if kind == "weekend":
        return f"the weekend of {format_day(s)}"
    if kind == "week":
        return f"the week of {format_day(s)}"
    if gran == "month" and (s.year, s.month) == (e.year, e.month):
        return f"{MONTH_NAMES[s.month - 1]} {s.year}"
    if gran == "year" and s == date(s.year, 1, 1) and e == date(s.year, 12, 31):
        return str(s.year)
    return range_label(s, e)


def unit_span(unit: str, d: date) -> tuple[date, date, str]:
    """The calendar unit that holds day d."""
    if unit == "day":
        return d, d, ""
    if unit == "week":
        return (*week_of(d), "week")
    if unit == "month":
        return (*month_span(d.year, d.month), "")
    return date(d.year, 1, 1), date(d.year, 12, 31), ""


def shift_by(unit: str, d: date, n: int) -> date:
    if unit in ("day", "week"):
        return d + timedelta(days=n * (7 if unit == "week" else 1))
    return add_months(d, n * (12 if unit == "year" else 1))
