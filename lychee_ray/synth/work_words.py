"""The work-conversation vocabulary: invented projects, their components and features, tools and
versions, what a user states, decides and prefers, and what an assistant proposes.

As in `words`, padding and advice name no value a question asks for, and the terms in
`NEVER_SAID` appear nowhere (abstention questions ask about them).
"""

from __future__ import annotations

PROJECT_HEADS = ("Lark", "Tide", "Quill", "Ember", "Salt", "Copper", "Night", "Raven", "Moss", "Flint", "Amber", "Birch")
PROJECT_TAILS = ("spur", "well", "mark", "line", "gate", "field", "stone", "loft", "crest", "wright")
PROJECT_KINDS = (
    "seed library catalogue", "inventory service", "recipe planner", "clinic booking app", "fleet telemetry dashboard",
    "library loans system", "event ticketing site", "greenhouse sensor monitor", "freelance invoicing tool",
)  # fmt: skip
COMPONENTS = (
    "metrics API", "ingest worker", "search endpoint", "billing job", "notification queue", "report exporter",
    "admin panel", "auth service", "upload handler", "scheduler", "pricing engine", "audit trail",
)  # fmt: skip
# features the user brings up one after another (event ordering): each is named only there
FEATURES = (
    "login page", "CSV import", "rate limiter", "password reset flow", "onboarding wizard", "invoice PDF export",
    "webhook retries", "tag filter", "bulk delete", "saved searches", "two-factor setup", "usage charts",
)  # fmt: skip
# (tool, lowest major, highest major): a version is major.minor.patch
TOOLS = (("Postgres", 12, 17), ("Python", 3, 3), ("Django", 3, 5), ("Node", 16, 22), ("FastAPI", 0, 0), ("nginx", 1, 1), ("SQLite", 3, 3), ("Flask", 2, 3))
CONTRADICTED_TOOLS = ("Redis", "Celery", "Docker", "Kafka", "RabbitMQ", "Elasticsearch", "MongoDB", "Ansible")
LIBRARIES = ("httpx", "orjson", "tenacity", "structlog", "alembic", "uvicorn", "ruff", "mypy", "click", "gunicorn", "pydantic", "jinja2")
MILESTONES = ("beta launch", "security review", "public release", "data migration", "load test", "design freeze", "partner demo")
PAST_WORK = ("first version of the {component}", "load testing of the {component}", "code review of the {component}", "migration of the {component}", "cleanup of the {component}")
TABLES = ("receipts", "invoices", "customers", "shipments", "bookings", "devices", "vendors", "payouts")
COLUMNS = (
    "merchant_code", "receipt_url", "memo_text", "tax_region", "due_window", "risk_score", "archived_at",
    "external_ref", "batch_tag", "review_state", "origin_hint", "settled_on",
)  # fmt: skip
ENDPOINTS = ("/export/summary", "/health/deep", "/v2/rates", "/admin/replay", "/batch/status", "/users/merge", "/quota/peek", "/jobs/retry")
TABLE_WORDS = (("refund", "requests"), ("login", "attempts"), ("price", "snapshots"), ("export", "jobs"), ("device", "pings"), ("coupon", "grants"))

# (value, the question that tests it, what a compliant answer does)
PREFERENCES = (
    ("plain SQL over an ORM", "How should I write the new report queries?"),
    ("the standard library wherever it is enough", "How should I parse the settings file?"),
    ("small functions with type hints", "How would you restructure the importer module?"),
    ("pytest over unittest", "How should I test the retry logic?"),
    ("structured JSON logs", "How should the services log their errors?"),
    ("feature flags over long-lived branches", "How should I roll out the new pricing page?"),
)
INSTRUCTIONS = (
    ("always show shell commands in a fenced bash block", "How do I run the database migrations?", "shows the commands in a fenced bash block"),
    ("always name the file each snippet belongs in", "Can you show me how to add a health check endpoint?", "says which file each snippet belongs in"),
    ("always end your answer with a one-line summary", "How should I cache the exchange rates?", "ends with a one-line summary"),
    ("always give time estimates in hours", "How long would a rewrite of the search code take?", "gives the estimate in hours"),
)
# a decision about a component (summarization): "{component}" is filled in
DECISIONS = (
    "move the {component} into its own service", "cache the {component} results in memory",
    "add request tracing to the {component}", "drop the legacy endpoints of the {component}",
    "run the {component} on a nightly schedule", "rewrite the {component} tests with fixtures",
)  # fmt: skip

NEVER_SAID = ("push notifications", "GraphQL", "Kubernetes", "dark mode", "mobile app", "Terraform", "WebSockets", "Kotlin")

USER_PADDING = (
    "I want to keep this simple.", "The codebase is still fairly small.", "I would like to keep the diff small.",
    "Let me know if you need more context.", "I am mostly working on this on my own.", "Readability matters more to me than cleverness.",
    "I have a bit of time to get this right.", "I would rather not over-engineer it.",
)  # fmt: skip
TASKS = (
    "adding retries", "structuring the tests", "logging errors", "handling timeouts", "paginating results",
    "validating input", "cleaning up old records", "profiling slow requests", "splitting the config", "handling partial failures",
)  # fmt: skip
ASK_OPENERS = ("Can you walk me through {task} in the {component}?", "What is a clean way of {task} in the {component}?",
               "How would you approach {task} in the {component}?", "Any advice on {task} in the {component}?")
FOLLOWUPS = ("Thanks, that helped. One more thing about the {component}: what about {task}?",
             "That worked. For the {component}, how would you go about {task}?")
ADVICE = (
    "The main thing is to keep {task} close to the code that needs it, so the {component} stays easy to follow.",
    "Start with the simplest version that works, then measure before adding anything clever.",
    "Keep the interface of the {component} small, and put the details behind one function.",
    "Write the test first, so you know when {task} actually works.",
    "Log enough to debug a failure later, but keep secrets and personal data out of the logs.",
    "A short comment that says why, not what, saves the next reader a lot of time.",
    "Prefer explicit configuration over magic defaults; it makes behaviour easier to reason about.",
    "Make the failure path as visible as the happy path, so problems surface early.",
)  # fmt: skip
BULLETS = (
    "Keep each function focused on one job.", "Return early on invalid input.", "Use clear names for config keys.",
    "Add a test for the failure case, not only the happy path.", "Document the defaults in one place.",
    "Avoid global state where you can.", "Time out every network call.", "Make retries idempotent.",
    "Keep the public interface small.", "Measure before optimising.",
)  # fmt: skip
ACKS = (
    "Thanks, that context helps me tailor the advice to your setup.", "Good to know, I will keep that in mind for the next steps.",
    "Understood, that shapes how I would approach the rest.", "Noted, that makes the trade-offs clearer.",
)  # fmt: skip
