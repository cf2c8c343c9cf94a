"""Session dates, the date expressions a turn uses for an event, and how each format writes a
date.

A past event is said either absolutely ("on 14 March", "on 14 March 2024") or relative to the
session date ("yesterday", "the day before yesterday", "three days ago", "a week ago", "two
weeks ago", "last Saturday"). Each expression has one reading:
- "N days ago", "a week ago" (7 days), "two weeks ago" (14 days) count whole days back;
- "last <weekday>" is used only where the two common readings agree: the most recent such day
  strictly before the session date, which also lies in the Monday-Sunday week before it;
- a day and month without a year is the most recent one on or before the session date (only
  used within the past year). Future days are always written with their year.
"""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta

from lychee_ray.dates import MONTH_NAMES

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}
_FIRST_DAY = date(2023, 1, 2)
_LAST_START_DAY = date(2024, 9, 30)


def session_starts(rng: random.Random, n: int) -> list[datetime]:
    """`n` session start times, 3 to 12 days apart, each between 09:00 and 20:59."""
    day = _FIRST_DAY + timedelta(days=rng.randrange((_LAST_START_DAY - _FIRST_DAY).days))
    starts = []
    for _ in range(n):
        starts.append(datetime(day.year, day.month, day.day, rng.randrange(9, 21), rng.randrange(60)))
        day += timedelta(days=rng.randrange(3, 13))
    return starts


def day_text(day: date, year: bool = True) -> str:
    """"14 March 2024" (or "14 March"): how answers and turns write a day."""
    text = f"{day.day} {MONTH_NAMES[day.month - 1]}"
    return f"{text} {day.year}" if year else text


def past_expressions(day: date, said_on: date) -> list[str]:
    """Every expression (see the module docstring) that names `day` when said on `said_on`."""
    back = (said_on - day).days
    if back < 1:
        return []
    found = []
    if back == 1:
        found.append("yesterday")
    elif back == 2:
        found.append("the day before yesterday")
    elif back <= 6:
        found.append(f"{NUMBER_WORDS[back]} days ago")
    elif back == 7:
        found.append("a week ago")
    elif back == 14:
        found.append("two weeks ago")
    previous_monday = said_on - timedelta(days=said_on.weekday() + 7)
    if back <= 7 and previous_monday <= day < previous_monday + timedelta(days=7):
        found.append(f"last {WEEKDAYS[day.weekday()]}")
    if back < 300:
        found.append(f"on {day_text(day, year=False)}")
    found.append(f"on {day_text(day)}")
    return found


def describe_past(rng: random.Random, day: date, said_on: date) -> str:
    """One expression for `day`, a relative one when there is one (three times in four)."""
    options = past_expressions(day, said_on)
    relative = [o for o in options if not o.startswith("on ")]
    if relative and rng.random() < 0.75:
        return rng.choice(relative)
    return rng.choice([o for o in options if o.startswith("on ")])


def recent_day(rng: random.Random, said_on: date, most: int = 20) -> date:
    """A day 1 to `most` days before `said_on`, the near ones likelier (they have relative names)."""
    back = rng.choice([1, 2, 3, 4, 5, 6, 7, 14, rng.randrange(1, most + 1)])
    return said_on - timedelta(days=back)


# --------------------------------------------------------------------------------------------
# How each format writes a session time
# --------------------------------------------------------------------------------------------
def locomo_stamp(t: datetime) -> str:
    """LoCoMo's "3:07 pm on 14 March, 2024"."""
    hour = t.hour % 12 or 12
    return f"{hour}:{t.minute:02d} {'am' if t.hour < 12 else 'pm'} on {t.day} {MONTH_NAMES[t.month - 1]}, {t.year}"


def longmemeval_stamp(t: datetime) -> str:
    """LongMemEval's "2024/03/14 (Thu) 15:07"."""
    return f"{t.year}/{t.month:02d}/{t.day:02d} ({WEEKDAYS[t.weekday()][:3]}) {t.hour:02d}:{t.minute:02d}"


def beam_anchor(t: datetime) -> str:
    """BEAM's time anchor, "March-15-2024"."""
    return f"{MONTH_NAMES[t.month - 1]}-{t.day:02d}-{t.year}"
