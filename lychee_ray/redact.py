"""The one redaction helper: what logs, reports, tables and error messages print of a secret.

API keys are named by environment variable in our configs, never held in them, but a user may
still paste a key into the wrong field (`llm.api_key: sk-...`), put one in a URL
(`http://user:KEY@host/v1`), or an LLM server may echo one in an error body. Everything that
prints config values, endpoint URLs or server errors goes through here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import ValidationError

MASK = "***"
# A field whose name says it holds a secret: its value is never printed.
_SECRET_FIELD = re.compile(r"key|token|secret|passw|credential|auth", re.IGNORECASE)
# Values that look like credentials wherever they appear: OpenAI/Anthropic-style keys, Hugging
# Face tokens, bearer tokens, AWS access key ids.
_SECRET_VALUE = re.compile(
    r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{8,}|\bhf_[A-Za-z0-9]{8,}|\bBearer\s+[A-Za-z0-9._\-]{8,}|\bAKIA[A-Z0-9]{12,}"
)
# scheme://user:password@host -> scheme://***@host (the user name can be the key too)
_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.\-]*://)[^/@\s]+@", re.IGNORECASE)


def is_secret_field(name: str) -> bool:
    return bool(_SECRET_FIELD.search(name))


def mask_url(url: str | None) -> str | None:
    """The URL with any user:password@ part masked."""
    return None if url is None else _URL_USERINFO.sub(rf"\g<scheme>{MASK}@", url)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with the given secrets, URL userinfo and key-looking tokens masked."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, MASK)
    return _SECRET_VALUE.sub(MASK, mask_url(text) or "")


def validation_errors(exc: ValidationError) -> str:
    """pydantic's errors as lines `section.key: message (got VALUE)`, where VALUE is left out
    for a secret-looking field and redacted everywhere (pydantic's own text echoes it raw)."""
    lines = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        line = f"  {where}: {err['msg']}"
        value = err.get("input")
        if not isinstance(value, (dict, list)) and value is not None:
            shown = MASK if is_secret_field(where) else redact(repr(value))
            line += f" (got {shown[:80]})"
        lines.append(line)
    return "\n".join(lines)
