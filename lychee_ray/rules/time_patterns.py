"""The patterns of the rules backend's time parser (timeparse.py): every regular expression it
matches, compiled once at import, and the word tables they read. Data only.
"""

from __future__ import annotations

import re

from lychee_ray.dates import DMY_RE, MDY_RE, MONTH, WD_FULL, Y  # noqa: F401  (used inside the patterns)

WEEKDAY_NUM = {"monday": 0, "tuesday": 1, "wednesday": 2, "thursday": 3, "friday": 4, "saturday": 5, "sunday": 6,
                "mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4, "sat": 5, "sun": 6}  # fmt: skip
ORDINALS = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4, "4th": 4, "last": -1, "final": -1}
# "sun", "sat", "wed", "mon" are words too: short forms only count capitalized.
WD_ANY = WD_FULL + r"|(?:tues|thurs|thur|fri)(?![a-z])\.?|(?-i:Mon|Tue|Wed|Thu|Sat|Sun)(?![a-z])\.?"
NUM = (
    r"(?:\d{1,3}|a\s+couple(?:\s+of)?|couple(?:\s+of)?|a\s+few|few|several|an?|one|two|three|four|five"
    r"|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen"
    r"|nineteen|twenty|thirty|forty|fifty)"
)
UNITS_AFTER_YEAR = (
    r"%|percent|dollars?|bucks|calories|miles?|km|kilometers?|meters?|metres?|feet|ft|pounds?|lbs|kg"
    r"|people|steps|words|points|followers|members|subscribers|views|likes|copies|pieces|units|times"
    r"|hours|minutes|seconds|yards|sq|square|k\b"
)

IGNORE_CASE = re.IGNORECASE
ISO_RE = re.compile(r"(?<![\d/-])(?P<y>\d{4})[-/](?P<m>\d{1,2})[-/](?P<d>\d{1,2})(?![\d/-])")
US_RE = re.compile(r"(?<![\d/])(?P<m>\d{1,2})/(?P<d>\d{1,2})/(?P<y>\d{4})(?![\d/])")
ORDINAL_DAY_RE = re.compile(r"\bon\s+the\s+(?P<d>\d{1,2})(?:st|nd|rd|th)\b(?!\s+of\b|\s*[-–]|\s+(?:century|centuries|anniversary|birthday|floor|place|time|grade|street|avenue)\b)", IGNORE_CASE)
MONTH_YEAR_RE = re.compile(rf"\b(?P<m>{MONTH}),?\s*{Y}", IGNORE_CASE)
MONTH_CTX_RE = re.compile(
    r"\b(?P<pre>in|during|since|by|until|till|through|throughout|last|this|next|early|late|mid-?"
    r"|(?:the\s+)?(?:end|beginning|start|middle)\s+of|around|before|after|from)\s+"
    rf"(?P<m>{MONTH})(?![\w-])(?!\s*,?\s*\d)",
    IGNORE_CASE,
)
YEAR_RE = re.compile(rf"(?<![\w$£€#.,/'-]){Y}(?![\w%/-]|[.,]\d|\s*(?:{UNITS_AFTER_YEAR})\b)", IGNORE_CASE)
SEASON_RE = re.compile(
    r"\b(?:(?P<pre>last|this\s+past|past|this\s+coming|this|next|coming)\s+)?(?:the\s+)?"
    rf"(?P<s>spring|summer|fall|autumn|winter)(?:\s+(?:of\s+)?{Y})?",
    IGNORE_CASE,
)
ORD_WEEK_RE = re.compile(
    r"\b(?:the\s+)?(?P<ord>first|1st|second|2nd|third|3rd|fourth|4th|last|final)\s+(?P<u>week|weekend)\s+(?:of|in)\s+"
    rf"(?P<m>{MONTH})(?:,?\s*{Y})?",
    IGNORE_CASE,
)
RELDAY_RE = re.compile(
    r"\b(?:(?P<m2>(?:the\s+)?day\s+before\s+yesterday)|(?P<p2>(?:the\s+)?day\s+after\s+tomorrow)"
    r"|(?P<m1>yesterday|last\s+night)|(?P<z>today|tonight|this\s+(?:morning|afternoon|evening))|(?P<p1>tomorrow))\b",
    IGNORE_CASE,
)
REL_UNIT_RE = re.compile(
    r"\b(?P<pre>this\s+past|the\s+past|the\s+last|this\s+coming|the\s+coming|last|this|next|past|coming|over\s+the)\s+"
    r"(?P<u>week|weekend|month|year)\b(?!\s+of\b)",
    IGNORE_CASE,
)
AGO_RE = re.compile(rf"\b(?P<n>{NUM})\s+(?P<u>day|week|weekend|month|year)s?\s+ago\b", IGNORE_CASE)
IN_N_RE = re.compile(
    rf"\b(?:in\s+(?P<n>{NUM})\s+(?P<u>day|week|month|year)s?\b(?!\s+(?:ago|old|before|after))"
    rf"|(?P<n2>{NUM})\s+(?P<u2>day|week|month|year)s?\s+from\s+now\b)",
    IGNORE_CASE,
)
DURATION_RE = re.compile(
    rf"\b(?:for\s+(?:the\s+(?:past|last)\s+)?(?P<n>{NUM})\s+(?P<u>year|month|week|day)s?\b(?!\s+(?:old|ago))"
    rf"|(?P<n2>{NUM})\s+(?P<u2>year|month)s?\s+now\b)",
    IGNORE_CASE,
)
WD_REL_RE = re.compile(
    rf"\b(?P<pre>this\s+past|this\s+coming|last|this|next|past|coming)\s+(?P<wd>{WD_ANY})"
    r"(?:\s+(?:morning|afternoon|evening|night))?(?![a-z])",
    IGNORE_CASE,
)
WD_ON_RE = re.compile(
    rf"\b(?:on\s+(?P<wd>{WD_FULL})(?![a-z])|(?P<wd2>{WD_FULL})\s+(?:morning|afternoon|evening|night)\b)", IGNORE_CASE
)
# Looked for just before an absolute day: "the week before 14 March 2024", "two weekends before ...".
BEFORE_DAY_RE = re.compile(
    rf"(?:\b(?P<n>{NUM})\s+(?P<u>day|week|weekend|month)s?|(?:\bthe\s+)?\b(?P<k>day|night|week|weekend|month|{WD_FULL}))"
    r"\s+(?P<dir>before|after|of)\s+(?:the\s+)?$",
    IGNORE_CASE,
)
SINCE_RE = re.compile(r"\bsince\s+$", IGNORE_CASE)
PERFECT_RE = re.compile(r"\b(?:have|has|had|'ve|been|known)\b", IGNORE_CASE)
FUTURE_RE = re.compile(
    r"(?:\b(?:will|won't|shall|gonna|upcoming|tomorrow|soon|intend|intending)\b|'ll\b"
    r"|\b(?:am|is|are|'m|'re)\s+(?:going\s+to|planning|hoping|about\s+to|thinking\s+(?:about|of))"
    r"|\bplan(?:s|ning)?\s+(?:to|on)\b|\bhop(?:e|ing)\s+to\b|\blooking\s+forward\b|\bcan't\s+wait\b)",
    IGNORE_CASE,
)
SENT_END = re.compile(r"[.!?\n]")
BEFORE_MOD_RE = re.compile(r"\b(?:before|prior\s+to|until|till|by)\s+(?:the\s+)?$", IGNORE_CASE)
AFTER_MOD_RE = re.compile(r"\b(?:after|since|from)\s+(?:the\s+)?$", IGNORE_CASE)
