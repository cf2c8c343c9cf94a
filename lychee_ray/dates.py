"""Calendar basics: month names, the day-month-year regexes, source timestamps and safe dates.

`parse_source_datetime` reads LoCoMo, LongMemEval, BEAM, ISO and plain-date session stamps and never
raises. A core module so the readers (`io`) can parse stamps without importing `rules`; the
time-expression logic built on these pieces is `rules.timeparse`.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta, timezone

MONTH_NAMES = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
MONTH_NUM = {name.lower(): i for i, name in enumerate(MONTH_NAMES, start=1)}
MONTH_NUM.update({"jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "sept": 9, "oct": 10, "nov": 11, "dec": 12})
WEEKDAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
WD_FULL = rf"(?:{'|'.join(WEEKDAY_NAMES)})"

# "May" and "March" are also ordinary words, so they (and "Mar") only count capitalized.
MONTH = (
    r"(?:(?i:january|february|april|june|july|august|september|october|november|december"
    r"|jan|feb|apr|jun|jul|aug|sept|sep|oct|nov|dec)|(?-i:May|MAY|March|MARCH|Mar))(?![a-z])\.?"
)
_SUFFIX = r"(?:st|nd|rd|th)?"
Y = r"(?P<y>(?:19|20)\d\d)(?!\d)"
DMY_RE = re.compile(
    rf"\b(?:{WD_FULL},?\s+)?(?:the\s+)?(?P<d>\d{{1,2}}){_SUFFIX}(?:\s*[-–]\s*(?P<d2>\d{{1,2}}){_SUFFIX})?"
    rf"(?:\s+of)?\s*(?P<m>{MONTH})(?:,?\s*{Y})?",
    re.IGNORECASE,
)
MDY_RE = re.compile(
    rf"\b(?:{WD_FULL},?\s+)?(?P<m>{MONTH})\s*(?P<d>\d{{1,2}}){_SUFFIX}(?:\s*[-–]\s*(?P<d2>\d{{1,2}}){_SUFFIX})?(?!\d)"
    rf"(?:,?\s*{Y})?",
    re.IGNORECASE,
)

# Source stamps.
_LOCOMO_STAMP_RE = re.compile(
    rf"^\s*(?P<h>\d{{1,2}}):(?P<mi>\d{{2}})\s*(?P<ap>[ap])\.?\s*m\.?\s+on\s+(?P<d>\d{{1,2}})\s+(?P<m>{MONTH}),?\s+(?P<y>\d{{4}})\s*$",
    re.IGNORECASE,
)
_LME_STAMP_RE = re.compile(
    r"^\s*(?P<y>\d{4})/(?P<m>\d{1,2})/(?P<d>\d{1,2})(?:\s*\([A-Za-z]+\))?(?:\s+(?P<h>\d{1,2}):(?P<mi>\d{2})(?::(?P<s>\d{2}))?)?\s*$"
)
_BEAM_STAMP_RE = re.compile(rf"^\s*(?P<m>{MONTH})-(?P<d>\d{{1,2}})-(?P<y>\d{{4}})\s*$", re.IGNORECASE)  # "March-15-2024"


# --------------------------------------------------------------------------------------------
# Source timestamps
# --------------------------------------------------------------------------------------------
def parse_source_datetime(s) -> datetime | None:
    """"4:27 pm on 2 April, 2024" (LoCoMo), "2024/03/07 (Thu) 09:15" (LongMemEval), "March-15-2024"
    (BEAM's time anchors), ISO 8601, or a plain date ("2 April 2024", "April 2, 2024"). None for
    anything else, never an exception.
    ISO strings with an offset come back timezone-aware, all others naive."""
    if isinstance(s, datetime):
        return s
    if not isinstance(s, str) or not s.strip():
        return None
    try:
        if m := _LOCOMO_STAMP_RE.match(s):
            hour = int(m["h"]) % 12 + (12 if m["ap"].lower() == "p" else 0)
            return datetime(int(m["y"]), month_num(m["m"]), int(m["d"]), hour, int(m["mi"]))
        if m := _LME_STAMP_RE.match(s):
            return datetime(int(m["y"]), int(m["m"]), int(m["d"]), int(m["h"] or 0), int(m["mi"] or 0), int(m["s"] or 0))
        if m := _BEAM_STAMP_RE.match(s):
            return datetime(int(m["y"]), month_num(m["m"]), int(m["d"]))
    except ValueError:  # out-of-range field: "31 February", hour 25
        return None
    try:
        return datetime.fromisoformat(s.strip())
    except ValueError:
        pass
    text = s.strip()
    for rx in (DMY_RE, MDY_RE):
        m = rx.fullmatch(text)
        if m and m["y"] and not m["d2"]:
            d = safe_date(int(m["y"]), month_num(m["m"]), int(m["d"]))
            return datetime(d.year, d.month, d.day) if d else None
    return None


def _date_of(value) -> date | None:
    """The date of a date or a datetime (a datetime is a date too: test it first); else None."""
    if isinstance(value, datetime):
        return value.date()
    return value if isinstance(value, date) else None


def as_date(value) -> date | None:
    """Any source stamp (see `parse_source_datetime`), a date or a datetime -> the date."""
    if value is None:
        return None
    if (d := _date_of(value)) is not None:
        return d
    dt = parse_source_datetime(value)
    return dt.date() if dt else None


# --------------------------------------------------------------------------------------------
# Calendar arithmetic
# --------------------------------------------------------------------------------------------
def month_num(name: str) -> int:
    return MONTH_NUM[name.rstrip(".").lower()]


def safe_date(y: int, m: int, d: int) -> date | None:
    try:
        return date(y, m, d)
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------
# ISO dates and timestamps in the store and in plans
# --------------------------------------------------------------------------------------------
_YEAR_ONLY = re.compile(r"\d{4}")
_YEAR_MONTH = re.compile(r"\d{4}-\d{2}")


def month_end(year: int, month: int) -> date:
    return date(year + month // 12, month % 12 + 1, 1) - timedelta(days=1)


def parse_iso_date(value, *, end: bool = False) -> date | None:
    """A date, a datetime or an ISO string ("2023-05-08", "2023-05-08T13:56") -> the date;
    "2023-05" and "2023" widen to their first day, or their last with `end=True`, because a
    record's time range or a plan's window may be that coarse. None when it does not parse."""
    if value is None:
        return None
    if (d := _date_of(value)) is not None:
        return d
    text = str(value).strip()
    try:
        if _YEAR_ONLY.fullmatch(text):
            return date(int(text), 12, 31) if end else date(int(text), 1, 1)
        if _YEAR_MONTH.fullmatch(text):
            y, m = int(text[:4]), int(text[5:])
            return month_end(y, m) if end else date(y, m, 1)
        return date.fromisoformat(text[:10])
    except ValueError:
        return None


def parse_iso_timestamp(value) -> datetime | None:
    """ISO 8601 (or a date/datetime) -> naive UTC datetime to the second, as the store keeps
    timestamps; None when it does not parse."""
    if isinstance(value, datetime):
        ts = value
    elif isinstance(value, date):
        ts = datetime(value.year, value.month, value.day)
    else:
        try:
            ts = datetime.fromisoformat(str(value).strip())
        except ValueError:
            return None
    if ts.tzinfo is not None:
        ts = ts.astimezone(timezone.utc).replace(tzinfo=None)
    return ts.replace(microsecond=0)
