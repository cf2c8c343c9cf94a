"""Answering from a store (stage 6): plan a question, retrieve and fuse evidence from the store's
channels, select it under the context budget, answer. No Ray and no judging: evaluate, the
ablation grid and `lychee-ray query` all call it.
"""
