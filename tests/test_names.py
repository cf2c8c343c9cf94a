"""One name normalisation: the Python key (organize, rules) and the SQL macro (node matching)
agree, so a node built at ingest is found by the query that names it."""

from __future__ import annotations

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st

from lychee_ray.names import NORMALIZE_NAME_SQL, normalize_name

# ASCII, Latin-1 letters and the typographic apostrophe. Outside that, Python's and DuckDB's
# Unicode case mappings differ on a few letters (e.g. "İ" lowers to "i" + a combining dot in
# Python): names are compared within one store, so only agreement on real names matters.
NAME_CHARS = st.sampled_from(list("abcXYZ '’-_.,!?&0123456789sSTtheHEaAnN") + list("éÉüÜñçß"))


def _sql():
    con = duckdb.connect()
    con.execute(NORMALIZE_NAME_SQL)
    return con


def test_known_names():
    for raw, key in [
        ("The Support-Group's", "support group"),
        ("support group", "support group"),
        ("The Expanse", "expanse"),
        ("Dr. Seuss", "dr seuss"),
        ("Mel’s", "mel"),
        ("  café  ", "café"),
        ("an apple", "apple"),
        ("Theatre", "theatre"),
    ]:
        assert normalize_name(raw) == key


@settings(max_examples=200, deadline=None)
@given(st.text(NAME_CHARS, max_size=30))
def test_sql_macro_equals_python(name):
    con = _sql()
    assert con.execute("SELECT lychee_norm(?)", [name]).fetchone()[0] == normalize_name(name)
