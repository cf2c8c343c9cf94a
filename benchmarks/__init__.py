"""Speed and cost measurements (never timed asserts in the test suite)."""
