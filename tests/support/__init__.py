"""Test support shared by tests and benchmarks: a fake OpenAI-compatible server, helpers for a
tiny random-weight model on the real vLLM CPU engine, and pytest fixtures for both."""
