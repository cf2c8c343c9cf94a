"""Ingest: read -> embed -> segment -> encode -> organize -> write, as one Ray Data job (`job`).

One module per stage after the read (`embed`, `segment`, `encode` with its reference context in
`context`, `organize`); the readers are in `lychee_ray.io` and the writer in `lychee_ray.store`.
"""
