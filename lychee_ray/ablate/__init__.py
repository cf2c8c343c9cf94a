"""`lychee-ray ablate`: the paper's ablations and reference systems run as one grid in one process,
sharing reads, embeddings, segmentations, stores and evaluations between variants. The top layer
under the CLI: `grid` loads the spec, `runner` runs it, `report` writes the comparison.
"""
