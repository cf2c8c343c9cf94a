"""Execution plumbing of the jobs: the stage base classes and their Ray Data adapter (`stage`), a
pipeline of stages and a sink that runs on Ray Data or in one process (`pipeline`), and joining
or starting Ray (`ray`). Stages written against it stay plain Python, so the same object runs in a
unit test, in a Ray actor and in the ablation grid's single process.
"""
