"""Stage 7, evaluate: batch QA over a store as a Ray Data job (`job`): plan, retrieve and answer
through `lychee_ray.query`, then judge and score, with the naive-RAG and BM25 baselines at the
same budget. Answers are committed in resumable Parquet parts and summed up in a report.
"""
