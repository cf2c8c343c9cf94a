"""An assistant's reply in a work conversation: a lead paragraph (where a proposal is), advice,
a bullet list, numbered steps with commands and a pinned version, a fenced code block.

The lead comes first so that a reader that splits an overlong turn at sentence boundaries keeps
the labelled sentence in the part that keeps the turn's id. Nothing after the lead holds a value
a question asks for: library versions come from the conversation's pool, one per library.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from lychee_ray.synth.work_words import ADVICE, BULLETS

_CODE = {
    "python": (
        "def {fn}(records, *, strict=False):\n"
        '    """{Task} for the {component}."""\n'
        "    cleaned = [r for r in records if r is not None]\n"
        "    if strict and len(cleaned) != len(records):\n"
        '        raise ValueError("missing records in {slug}")\n'
        "    return cleaned"
    ),
    "bash": "cd services/{slug}\npytest tests -q -k {task_slug}\nruff check src/{slug}",
    "sql": "SELECT id, status, updated_at\nFROM {slug}_events\nWHERE status = 'failed'\nORDER BY updated_at DESC;",
    "yaml": "{slug}:\n  retries: enabled\n  log_level: info\n  owner: platform",
}


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


@dataclass
class ReplyWriter:
    rng: random.Random
    words: int  # the conversation's turn length; a reply's prose is about four times that
    library_versions: dict[str, str] = field(default_factory=dict)  # pinned library -> version

    def reply(self, lead: str, component: str, task: str) -> str:
        target = max(30, 4 * self.words)
        advice = [a.format(component=component, task=task) for a in self.rng.sample(ADVICE, len(ADVICE))]
        first, rest = [lead], []
        while advice and _words(first + rest) < target:
            (first if len(first) < 3 else rest).append(advice.pop())
        parts = [" ".join(first)]
        if rest:
            parts.append(" ".join(rest))
        parts.append("A few things to keep in mind:\n" + "\n".join(f"- {b}" for b in self.rng.sample(BULLETS, 3)))
        parts.append("Steps:\n" + "\n".join(f"{i}. {s}" for i, s in enumerate(self._steps(component, task), start=1)))
        language = self.rng.choice(sorted(_CODE))
        code = _CODE[language].format(fn=f"handle_{slug(task)}", Task=task.capitalize(), component=component, slug=slug(component), task_slug=slug(task))
        parts.append(f"```{language}\n{code}\n```")
        parts.append(self.rng.choice(("Let me know how it goes.", "Happy to go deeper on any of these.", "Tell me if anything is unclear.")))
        return "\n\n".join(parts)

    def _steps(self, component: str, task: str) -> list[str]:
        library = self.rng.choice(sorted(self.library_versions))
        return [
            f"Create a branch: `git checkout -b {slug(component)}-{slug(task)}`",
            f"Pin `{library}=={self.library_versions[library]}` in `requirements.txt` and run `pip install -r requirements.txt`",
            f"Run the tests: `pytest tests/test_{slug(component)}.py -q`",
        ]


def _words(sentences: list[str]) -> int:
    return sum(len(s.split()) for s in sentences)
