"""Ingest: archives in, a store out, as one Ray Data job (`job`).

`read` turns input parts into conversations and compares each with the store (`resume`: skip,
extend or redo); `pipeline` is the one list of stages after it, run on Ray by the job and in
process by the ablation grid: `embed` (turn vectors), `segment` (the online segmenter), `encode`
(one LLM call per segment, carrying the reference context of `reference_context`),
`evidence_nodes` (organize: nodes, edges, record and name vectors), then the `write` sink;
`summary` adds up what the run did. The readers are in `lychee_ray.io`, the writer in
`lychee_ray.store`.
"""
