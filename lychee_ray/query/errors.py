"""The query layer's user error, apart from `memory` so the CLI can catch it without importing
the query path (DuckDB, the store reader, the LLM client) for commands that never query."""


class QueryError(ValueError):
    """A question that cannot be searched (no words); the CLI prints it as one sentence."""
