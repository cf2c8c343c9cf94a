"""What a generated archive looks like: its size, style and format, checked once here."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Style = Literal["chitchat", "work", "mixed"]
Format = Literal["locomo", "longmemeval", "chat", "turns", "turns-parquet", "beam"]
FORMATS: tuple[str, ...] = ("locomo", "longmemeval", "chat", "turns", "turns-parquet", "beam")
STYLES: tuple[str, ...] = ("chitchat", "work", "mixed")


class SynthError(ValueError):
    """Parameters or an output folder that cannot make an archive: one sentence for the user."""


class SynthParams(BaseModel):
    """The generator's parameters. The same parameters (seed included) give the same archive,
    byte for byte."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    conversations: int = Field(4, ge=1, le=10_000)
    sessions: int = Field(8, ge=1, le=500)
    # exactly this many turns in every session; a work session alternates user and assistant
    turns_per_session: int = Field(16, ge=4, le=2_000)
    # words of a chit-chat or user turn (at least, padding included); an assistant reply in a
    # work conversation holds about four times as many words of prose, plus lists and code
    turn_words: int = Field(20, ge=4, le=400)
    style: Style = "mixed"
    format: Format = "chat"

    @model_validator(mode="after")
    def _even_work_sessions(self) -> "SynthParams":
        if self.style != "chitchat" and self.turns_per_session % 2:
            raise ValueError(
                f"turns_per_session is {self.turns_per_session}: a work session is user/assistant pairs, so it must be even"
            )
        return self

    def style_of(self, index: int) -> str:
        """The style of conversation `index` (0-based): mixed archives alternate, chit-chat first."""
        if self.style != "mixed":
            return self.style
        return "chitchat" if index % 2 == 0 else "work"

    @classmethod
    def checked(cls, **values) -> "SynthParams":
        """The parameters, or a `SynthError` naming each bad one as its command-line flag."""
        try:
            return cls(**values)
        except ValidationError as exc:
            problems = [(f"--{str(e['loc'][0]).replace('_', '-')}: " if e["loc"] else "") + e["msg"].removeprefix("Value error, ") for e in exc.errors()]
            raise SynthError("; ".join(problems)) from None
