"""Time expressions, source stamps and question windows (lychee_ray.rules.timeparse, lychee_ray.dates).

The table gives (text, anchor, expected (start, end, granularity)) per row; the conventions it
pins are the module docstring's: weeks are Monday-Sunday, "last <weekday>" is strictly before
the anchor, "last weekend" is the Sat-Sun that ended before the anchor.
Calendar facts used: 2023-05-08 is a Monday, 2023-07-15 a Saturday, 2023-01-15 a Sunday.
"""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest

from lychee_ray.dates import parse_source_datetime
from lychee_ray.rules.planner import resolve_question_window
from lychee_ray.rules.timeparse import (
    find_time_expressions,
    to_normalized,
)
from lychee_ray.schemas import NormalizedTime

# (text, anchor, (start, end, granularity)) - the first expression found in text.
TABLE = [
    # days relative to the session date
    ("I went to a pottery workshop yesterday", "2023-05-08", ("2023-05-07", "2023-05-07", "day")),
    ("yesterday", "2023-03-01", ("2023-02-28", "2023-02-28", "day")),  # non-leap February
    ("yesterday", "2024-03-01", ("2024-02-29", "2024-02-29", "day")),  # leap day
    ("the day before yesterday", "2024-03-01", ("2024-02-28", "2024-02-28", "day")),
    ("I'm seeing her today", "2023-05-08", ("2023-05-08", "2023-05-08", "day")),
    ("we're going out tonight", "2023-05-08", ("2023-05-08", "2023-05-08", "day")),
    ("this morning I ran", "2023-05-08", ("2023-05-08", "2023-05-08", "day")),
    ("last night was amazing", "2023-08-14", ("2023-08-13", "2023-08-13", "day")),
    ("see you tomorrow", "2023-12-31", ("2024-01-01", "2024-01-01", "day")),  # year rollover
    ("I went there two days ago", "2023-07-12", ("2023-07-10", "2023-07-10", "day")),
    ("a couple of days ago", "2023-07-12", ("2023-07-10", "2023-07-10", "day")),
    ("a few days ago", "2023-07-12", ("2023-07-09", "2023-07-09", "day")),  # a few = 3
    ("in 3 days", "2023-07-30", ("2023-08-02", "2023-08-02", "day")),
    # weekdays
    ("I swam in a relay last Saturday", "2023-05-25", ("2023-05-20", "2023-05-20", "day")),
    ("last Saturday", "2023-07-15", ("2023-07-08", "2023-07-08", "day")),  # on a Saturday: 7 days back
    ("Last Fri I took my nephews to a museum", "2023-07-15", ("2023-07-14", "2023-07-14", "day")),
    ("I joined a choir last Tues", "2023-07-20", ("2023-07-18", "2023-07-18", "day")),
    ("this Friday", "2023-05-08", ("2023-05-12", "2023-05-12", "day")),  # in the anchor's Mon-Sun week
    ("next Friday", "2023-05-08", ("2023-05-19", "2023-05-19", "day")),  # in the following week
    ("this coming Sunday", "2023-05-07", ("2023-05-14", "2023-05-14", "day")),
    ("I fixed the gate on Sunday", "2023-05-10", ("2023-05-07", "2023-05-07", "day")),  # most recent past
    ("I will call her on Sunday", "2023-05-10", ("2023-05-14", "2023-05-14", "day")),  # future tense
    # weeks (Monday-Sunday) and weekends (Saturday-Sunday)
    ("my pottery class last week", "2023-06-09", ("2023-05-29", "2023-06-04", "week")),
    ("last week", "2024-01-01", ("2023-12-25", "2023-12-31", "week")),  # year rollover
    ("last week", "2023-01-15", ("2023-01-02", "2023-01-08", "week")),  # Sunday anchor
    ("this week", "2023-08-23", ("2023-08-21", "2023-08-27", "week")),
    ("next week", "2023-12-28", ("2024-01-01", "2024-01-07", "week")),
    ("a week ago", "2023-05-08", ("2023-05-01", "2023-05-07", "week")),
    ("in two weeks", "2023-05-25", ("2023-06-05", "2023-06-11", "week")),
    ("Last weekend I tried out for a rowing club", "2023-07-17", ("2023-07-15", "2023-07-16", "week")),
    ("last weekend", "2023-07-15", ("2023-07-08", "2023-07-09", "week")),  # Saturday anchor: the previous one
    ("last weekend", "2023-01-15", ("2023-01-07", "2023-01-08", "week")),  # Sunday anchor
    ("this weekend", "2023-05-08", ("2023-05-13", "2023-05-14", "week")),
    ("that ferry trip this past weekend", "2023-10-20", ("2023-10-14", "2023-10-15", "week")),
    ("we went sailing two weekends ago", "2023-07-17", ("2023-07-08", "2023-07-09", "week")),
    # months
    ("last month", "2023-01-15", ("2022-12-01", "2022-12-31", "month")),  # year rollover
    ("going sailing next month", "2023-05-25", ("2023-06-01", "2023-06-30", "month")),
    ("next month", "2023-12-10", ("2024-01-01", "2024-01-31", "month")),
    ("a conference this month", "2023-07-03", ("2023-07-01", "2023-07-31", "month")),
    ("three months ago", "2023-02-15", ("2022-11-01", "2022-11-30", "month")),
    ("in May", "2023-07-01", ("2023-05-01", "2023-05-31", "month")),  # most recent past May
    ("I will go in May", "2023-07-01", ("2024-05-01", "2024-05-31", "month")),  # future tense: next May
    ("in December", "2023-01-15", ("2022-12-01", "2022-12-31", "month")),
    ("last December", "2023-01-15", ("2022-12-01", "2022-12-31", "month")),
    ("in May 2023", None, ("2023-05-01", "2023-05-31", "month")),
    ("February 2024", None, ("2024-02-01", "2024-02-29", "month")),  # leap February
    ("early August, 2023", None, ("2023-08-01", "2023-08-31", "month")),
    # seasons (northern hemisphere, granularity month)
    ("last summer", "2023-05-08", ("2022-06-01", "2022-08-31", "month")),
    ("last summer", "2023-09-10", ("2023-06-01", "2023-08-31", "month")),  # just ended
    ("this winter", "2023-01-15", ("2022-12-01", "2023-02-28", "month")),
    ("the summer of 2022", None, ("2022-06-01", "2022-08-31", "month")),
    # years
    ("this map I drew last year", "2023-07-12", ("2022-01-01", "2022-12-31", "year")),
    ("this year", "2023-07-12", ("2023-01-01", "2023-12-31", "year")),
    ("next year", "2023-07-12", ("2024-01-01", "2024-12-31", "year")),
    ("my first regatta ten years ago", "2023-06-27", ("2013-01-01", "2013-12-31", "year")),
    ("a year ago", "2024-02-29", ("2023-01-01", "2023-12-31", "year")),
    ("We loved the harbour fair in 2022", None, ("2022-01-01", "2022-12-31", "year")),
    ("since 2016", "2023-09-13", ("2016-01-01", "2023-09-13", "year")),
    ("I've kept these bees for 4 years", "2023-06-09", ("2019-01-01", "2023-06-09", "year")),
    ("Seven years now, and I still enjoy it", "2023-09-13", ("2016-01-01", "2023-09-13", "year")),
    # absolute days
    ("on 5 May", "2023-05-08", ("2023-05-05", "2023-05-05", "day")),
    ("on 10 May", "2023-05-08", ("2022-05-10", "2022-05-10", "day")),  # yearless: the most recent past one
    ("29 February", "2023-05-08", ("2020-02-29", "2020-02-29", "day")),  # the last leap year
    ("May 5th, 2023", None, ("2023-05-05", "2023-05-05", "day")),
    ("2 April, 2024", None, ("2024-04-02", "2024-04-02", "day")),
    ("the 5th of May 2023", None, ("2023-05-05", "2023-05-05", "day")),
    ("Saturday, May 20, 2023", None, ("2023-05-20", "2023-05-20", "day")),
    ("2023-05-07", None, ("2023-05-07", "2023-05-07", "day")),
    ("5/7/2023", None, ("2023-05-07", "2023-05-07", "day")),  # US month/day/year
    ("November 5-6, 2022", None, ("2022-11-05", "2022-11-06", "day")),
    ("I met my crew on the 15th", "2023-08-21", ("2023-08-15", "2023-08-15", "day")),
    ("on the 31st", "2023-03-10", ("2023-01-31", "2023-01-31", "day")),  # February has no 31st
    # relative to an absolute day (LoCoMo gold answers are written this way)
    ("The week before 14 March 2024", None, ("2024-03-04", "2024-03-10", "week")),
    ("The weekend before 19 February 2024", None, ("2024-02-17", "2024-02-18", "week")),
    ("The Friday before 10 August 2024", None, ("2024-08-09", "2024-08-09", "day")),
    ("The sunday before 12 September 2024", None, ("2024-09-08", "2024-09-08", "day")),
    ("two weekends before 19 February 2024", None, ("2024-02-10", "2024-02-11", "week")),
    ("The week of 16 October 2024", None, ("2024-10-14", "2024-10-20", "week")),
    ("The weekend after 7June, 2024.", None, ("2024-06-08", "2024-06-09", "week")),
    ("few days before April 23, 2024", None, ("2024-04-20", "2024-04-20", "day")),
    ("first weekend of October 2024", None, ("2024-10-05", "2024-10-06", "week")),
    ("first week of April 2024", None, ("2024-04-01", "2024-04-07", "week")),
    ("last week of November 2024", None, ("2024-11-24", "2024-11-30", "week")),
]


@pytest.mark.parametrize("text,anchor,expected", TABLE, ids=[f"{t[0]}@{t[1]}" for t in TABLE])
def test_table(text, anchor, expected):
    found = find_time_expressions(text, date.fromisoformat(anchor) if anchor else None)
    assert found, f"no expression found in {text!r}"
    te = found[0]
    assert (te.start, te.end, te.granularity) == expected
    assert text[te.span[0] : te.span[1]] == te.expression


def test_table_is_big_enough():
    assert len(TABLE) >= 40


@pytest.mark.parametrize(
    "text",
    [
        "I may go there someday",  # modal "may" is not a month
        "I sat down and the sun was out",  # "sat"/"sun" are not weekdays
        "I burned 2000 calories and spent $2019",
        "Recently I went hiking",  # too vague: not resolved
        "Lately things have been busy",
        "May I ask you something?",
        "I was sick for 2 days",  # a duration, not a date (no perfect tense)
        "",
    ],
)
def test_non_expressions(text):
    assert find_time_expressions(text, date(2023, 5, 8)) == []


def test_relative_needs_anchor_absolute_does_not():
    assert find_time_expressions("I went yesterday", None) == []
    assert find_time_expressions("in May", None) == []  # no year to give it
    [te] = find_time_expressions("on 7 May 2023", None)
    assert te.start == "2023-05-07" and te.relative is False


def test_multiple_expressions_in_order_and_labels():
    text = "Yesterday I ran, and last week I swam; next month I bike."
    found = find_time_expressions(text, "2023-05-08")
    assert [te.expression for te in found] == ["Yesterday", "last week", "next month"]
    assert [te.label for te in found] == ["7 May 2023", "the week of 1 May 2023", "June 2023"]
    assert all(te.relative for te in found)


def test_labels_parse_back_to_the_same_dates():
    """What the encoder writes into record text must resolve to the same window."""
    for text, anchor in [("last week", "2023-06-09"), ("two weekends ago", "2023-07-17"), ("last summer", "2023-05-08"),
                         ("for 4 years", "2023-06-09"), ("yesterday", "2023-05-08"), ("next month", "2023-05-25")]:  # fmt: skip
        [te] = find_time_expressions(text if "for" not in text else f"I've had it {text}", anchor)
        [back] = find_time_expressions(te.label, None)
        assert (back.start, back.granularity) == (te.start, te.granularity), te.label
        if not te.label.startswith("since"):
            assert back.end == te.end, te.label


def test_longest_match_wins():
    [te] = find_time_expressions("Last week before 21 November 2024.", None)
    assert te.expression == "week before 21 November 2024"
    assert (te.start, te.end) == ("2024-11-11", "2024-11-17")


def test_to_normalized():
    [te] = find_time_expressions("yesterday", "2023-05-08")
    nt = to_normalized(te)
    assert isinstance(nt, NormalizedTime)
    assert nt.model_dump() == {"start": "2023-05-07", "end": "2023-05-07", "granularity": "day", "expression": "yesterday"}
    assert te.to_normalized() == nt
    assert to_normalized(None).model_dump() == {"start": None, "end": None, "granularity": "none", "expression": None}


def test_anchor_may_be_datetime_or_string():
    a = find_time_expressions("yesterday", datetime(2024, 4, 2, 16, 27))
    b = find_time_expressions("yesterday", "4:27 pm on 2 April, 2024")
    c = find_time_expressions("yesterday", "2024-04-02T16:27:00")
    assert a[0].start == b[0].start == c[0].start == "2024-04-01"


# --------------------------------------------------------------------------------------------
# Source stamps
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "raw,expected",
    [
        ("4:27 pm on 2 April, 2024", datetime(2024, 4, 2, 16, 27)),
        ("9:41 am on 4 March, 2024", datetime(2024, 3, 4, 9, 41)),
        ("12:08 am on 19 October, 2024", datetime(2024, 10, 19, 0, 8)),  # 12 am is midnight
        ("12:30 pm on 1 January, 2024", datetime(2024, 1, 1, 12, 30)),  # 12 pm is noon
        ("2024/03/07 (Thu) 09:15", datetime(2024, 3, 7, 9, 15)),
        ("2024/03/14 (Thu) 08:30", datetime(2024, 3, 14, 8, 30)),
        ("2023/06/01", datetime(2023, 6, 1)),
        ("2024-04-02T16:27:00", datetime(2024, 4, 2, 16, 27)),
        ("2023-05-08", datetime(2023, 5, 8)),
        ("2023-05-08T13:56:00Z", datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)),
        ("2 April 2024", datetime(2024, 4, 2)),
        ("April 2, 2024", datetime(2024, 4, 2)),
        ("March-15-2024", datetime(2024, 3, 15)),  # BEAM's time anchors
        ("September-2-2024", datetime(2024, 9, 2)),
        ("Sept-02-2024", datetime(2024, 9, 2)),
    ],
)
def test_parse_source_datetime(raw, expected):
    assert parse_source_datetime(raw) == expected


@pytest.mark.parametrize("raw", ["garbage", "", "   ", None, 42, "1:00 pm on 31 February, 2023", "2023/02/30 (Thu) 10:00", "May 2023",
                                 "February-30-2024", "Smarch-15-2024", "March-15"])
def test_parse_source_datetime_unparseable_is_none(raw):
    assert parse_source_datetime(raw) is None


# --------------------------------------------------------------------------------------------
# Question windows
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "question,qdate,expected",
    [
        ("What did Orrin do in May 2023?", None, ("2023-05-01", "2023-05-31")),
        ("When did Orrin go to the pottery workshop?", None, None),
        ("What did I do last Saturday?", "2024/03/14 (Thu) 08:30", ("2024-03-09", "2024-03-09")),
        ("What happened before June 2023?", None, (None, "2023-05-31")),
        ("What did Odile do after May 2023?", None, ("2023-06-01", None)),
        ("What has she done since 2020?", "2024/03/14 (Thu) 08:30", ("2020-01-01", "2024-03-14")),
        ("What did they do in 2021 and in 2022?", None, ("2021-01-01", "2022-12-31")),
        ("Where did I go last week?", None, None),  # relative, and no question date
    ],
)
def test_resolve_question_window(question, qdate, expected):
    assert resolve_question_window(question, qdate) == expected
