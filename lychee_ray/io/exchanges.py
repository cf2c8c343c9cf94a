"""Exchanges: the segmenter works on exchanges x_t, not raw turns; every reader groups them here.

- `role` (LongMemEval, chat with roles): a user message plus the assistant replies that follow it.
- `pair` (LoCoMo's default `read.locomo_exchange: pair`, and chat without roles): a run of turns
  by one speaker plus the reply run of the other speaker, which is the closest analogue of a
  user/assistant exchange and halves the number of units the segmenter scores.
- `turn` (`read.locomo_exchange: turn`): each turn is an exchange.
An exchange never crosses a session.

The segmenter's hard token cap can only hold if no exchange is over it on its own: the reader
splits a turn longer than `read.max_turn_tokens` (never above the cap) into parts, and
`cap_exchanges` splits any exchange over the cap (two long turns, or a turn's parts) into runs of
its turns that fit.
"""

from __future__ import annotations

from lychee_ray.tables import Turn


# --------------------------------------------------------------------------------------------
# Exchanges
# --------------------------------------------------------------------------------------------
def group_exchanges(turns: list[Turn], rule: str) -> list[list[int]]:
    """Group turn indexes into exchanges; see the module docstring for the rules."""
    exchanges: list[list[int]] = []
    current: list[int] = []

    def close():
        nonlocal current
        if current:
            exchanges.append(current)
            current = []

    for i, t in enumerate(turns):
        if current and turns[current[-1]].session_id != t.session_id:
            close()
        if rule == "turn":
            close()
        elif rule == "role":
            # a new user message opens a new exchange; assistant replies join the open one
            if current and t.role == "user" and turns[current[-1]].role != "user":
                close()
        else:  # pair: one speaker's run, then the other speaker's run
            if current:
                speakers = []
                for j in current:
                    if not speakers or speakers[-1] != turns[j].speaker:
                        speakers.append(turns[j].speaker)
                if len(speakers) == 2 and t.speaker != speakers[-1]:
                    close()
        current.append(i)
    close()
    return exchanges


def cap_exchanges(exchanges: list[list[int]], turn_tokens: list[int], max_tokens: int) -> list[list[int]]:
    """Split every exchange whose turns hold more than `max_tokens` into consecutive runs that
    fit (a single turn over the cap stays alone), so the segmenter's cap can hold."""
    out: list[list[int]] = []
    for ex in exchanges:
        run: list[int] = []
        run_tokens = 0
        for i in ex:
            if run and run_tokens + turn_tokens[i] > max_tokens:
                out.append(run)
                run, run_tokens = [], 0
            run.append(i)
            run_tokens += turn_tokens[i]
        if run:
            out.append(run)
    return out
